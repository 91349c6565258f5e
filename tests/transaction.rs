//! Transactions end to end: large transactions, conditions, rejections, bad input, read-your-writes,
//! lock upgrades and request counts, on both commit paths.
mod common;

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use common::*;
use dynamodb_transactions::{Error, TxState};

/// Both commit paths: one `TransactWriteItems`, and phases.
async fn envs(prefix: &str) -> Vec<TestEnv> {
    vec![
        TestEnv::new(&format!("{prefix}-os")).await,
        TestEnv::with_settings(&format!("{prefix}-ph"), |s| s.one_shot_max_items = 0).await,
    ]
}

async fn assert_clean(env: &TestEnv) {
    for i in env.scan_all(&env.table).await {
        assert!(!has_tx_attrs(&i), "lock attributes left: {i:?}");
    }
    assert!(
        env.scan_all(env.manager.images_table()).await.is_empty(),
        "images left"
    );
}

#[tokio::test]
async fn thousand_item_transaction_commits_with_chunked_record() {
    let env = TestEnv::new("big").await;
    // Existing items to update, and new ones to insert: 1,000 requests of ~600 bytes each, more than
    // one record row holds.
    for i in 0..500 {
        env.raw_put(
            &env.table,
            item(&[("Id", s(&format!("u{i}"))), ("n", n(i))]),
        )
        .await;
    }
    let payload = "x".repeat(600);
    let tx = env.manager.begin();
    let id = tx.id().clone();
    for i in 0..500 {
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s(&format!("u{i}")))
            .update_expression("SET n = n + :one, p = :p")
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":p", s(&payload))
            .send()
            .await
            .unwrap();
        tx.put_item()
            .table_name(&env.table)
            .item("Id", s(&format!("i{i}")))
            .item("p", s(&payload))
            .send()
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    let items = env.scan_all(&env.table).await;
    assert_eq!(items.len(), 1000);
    for it in &items {
        assert!(!has_tx_attrs(it));
        let idv = it["Id"].as_s().unwrap();
        assert_eq!(it["p"], s(&payload));
        if let Some(i) = idv.strip_prefix('u') {
            assert_eq!(
                it["n"],
                n(i.parse::<i64>().unwrap() + 1),
                "{idv} updated exactly once"
            );
        }
    }
    // The record spilled into chunk rows and is finalized.
    let rows = env.scan_all(env.manager.transactions_table()).await;
    let header = rows.iter().find(|r| r["_TxN"] == n(0)).unwrap();
    let chunks: i64 = header["_TxC"].as_n().unwrap().parse().unwrap();
    assert!(chunks >= 1, "requests spread over chunk rows");
    assert_eq!(rows.len() as i64, 1 + chunks);
    assert_eq!(env.tx_state(&id).await, Some((TxState::Committed, true)));
    assert!(env.manager.delete_transaction(&id).await.unwrap());
    assert!(
        env.scan_all(env.manager.transactions_table())
            .await
            .is_empty(),
        "chunk rows deleted too"
    );
}

#[tokio::test]
async fn large_transaction_rolls_back_after_resume() {
    let env = TestEnv::new("bigrb").await;
    for i in 0..150 {
        env.raw_put(
            &env.table,
            item(&[("Id", s(&format!("u{i}"))), ("n", n(i))]),
        )
        .await;
    }
    let tx = env.manager.begin();
    let id = tx.id().clone();
    for i in 0..150 {
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s(&format!("u{i}")))
            .update_expression("SET n = :z")
            .expression_attribute_values(":z", n(-1))
            .send()
            .await
            .unwrap();
    }
    // The first apply batch lands (99 items), then the coordinator dies.
    let before = env.counter.total();
    let _ = before;
    env.faults.crash_at(
        1 + 150 + 2,
        dynamodb_transactions::fault::FaultMode::BeforeSend,
    );
    assert!(tx.commit().await.is_err());
    env.faults.disarm();
    let applied = env
        .scan_all(&env.table)
        .await
        .iter()
        .filter(|i| i.contains_key("_TxA"))
        .count();
    assert!(applied > 0 && applied < 150, "partly applied: {applied}");
    let (m2, _) = env.second_coordinator();
    m2.rollback_transaction(&id).await.unwrap();
    for it in env.scan_all(&env.table).await {
        let i: i64 = it["Id"].as_s().unwrap()[1..].parse().unwrap();
        assert_eq!(it["n"], n(i), "restored from its embedded image");
        assert!(!has_tx_attrs(&it));
    }
    assert_eq!(env.tx_state(&id).await, Some((TxState::RolledBack, true)));
}

#[tokio::test]
async fn condition_expressions_decide_the_whole_transaction() {
    for env in envs("cond").await {
        env.raw_put(&env.table, item(&[("Id", s("a")), ("bal", n(50))]))
            .await;
        env.raw_put(&env.table, item(&[("Id", s("b")), ("bal", n(0))]))
            .await;

        // True conditions, including one on an absent item (checked against a phantom key).
        let tx = env.manager.begin();
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s("a"))
            .update_expression("SET bal = bal - :x")
            .condition_expression("bal >= :x")
            .expression_attribute_values(":x", n(20))
            .send()
            .await
            .unwrap();
        tx.put_item()
            .table_name(&env.table)
            .item("Id", s("new"))
            .item("bal", n(20))
            .condition_expression("attribute_not_exists(Id)")
            .send()
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(
            env.raw_get(&env.table, &key("a")).await.unwrap()["bal"],
            n(30)
        );
        assert_eq!(
            env.raw_get(&env.table, &key("new")).await.unwrap()["bal"],
            n(20)
        );

        // A false condition rolls everything back and reports the request and the item.
        let tx = env.manager.begin();
        let id = tx.id().clone();
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s("b"))
            .update_expression("SET bal = bal + :x")
            .expression_attribute_values(":x", n(100))
            .send()
            .await
            .unwrap();
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s("a"))
            .update_expression("SET bal = bal - :x")
            .condition_expression("bal >= :x")
            .expression_attribute_values(":x", n(100))
            .send()
            .await
            .unwrap();
        match tx.commit().await {
            Err(Error::ConditionFailed {
                request_index,
                table,
                key: k,
                item: Some(current),
                ..
            }) => {
                assert_eq!(request_index, 1);
                assert_eq!(table, env.table);
                assert_eq!(k, key("a"));
                assert_eq!(current["bal"], n(30));
                assert!(!has_tx_attrs(&current));
            }
            other => panic!("expected ConditionFailed, got {other:?}"),
        }
        assert_eq!(
            env.raw_get(&env.table, &key("b")).await.unwrap()["bal"],
            n(0)
        );
        assert_eq!(
            env.raw_get(&env.table, &key("a")).await.unwrap()["bal"],
            n(30)
        );
        assert_eq!(env.tx_state(&id).await, Some((TxState::RolledBack, true)));

        // A condition that needs the item on an absent item fails, with no current item.
        let tx = env.manager.begin();
        tx.put_item()
            .table_name(&env.table)
            .item("Id", s("c"))
            .send()
            .await
            .unwrap();
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s("ghost"))
            .update_expression("SET bal = :x")
            .condition_expression("attribute_exists(Id)")
            .expression_attribute_values(":x", n(1))
            .send()
            .await
            .unwrap();
        match tx.commit().await {
            Err(Error::ConditionFailed {
                request_index: 1,
                item: None,
                ..
            }) => {}
            other => panic!("expected ConditionFailed on the absent item, got {other:?}"),
        }
        assert!(env.raw_get(&env.table, &key("c")).await.is_none());
        assert!(env.raw_get(&env.table, &key("ghost")).await.is_none());

        // A conditional delete.
        let tx = env.manager.begin();
        tx.delete_item()
            .table_name(&env.table)
            .key("Id", s("new"))
            .condition_expression("bal = :v")
            .expression_attribute_values(":v", n(999))
            .send()
            .await
            .unwrap();
        let err = tx.commit().await.unwrap_err();
        assert!(err.is_condition_failed());
        assert_eq!(
            err.transaction_outcome(),
            Some(dynamodb_transactions::TxOutcome::RolledBack)
        );
        assert!(env.raw_get(&env.table, &key("new")).await.is_some());
        assert_clean(&env).await;
    }
}

#[tokio::test]
async fn a_request_dynamodb_rejects_rolls_back_cleanly() {
    for env in envs("rej").await {
        env.raw_put(&env.table, item(&[("Id", s("a")), ("foo", s("bar"))]))
            .await;
        env.raw_put(&env.table, item(&[("Id", s("b")), ("n", n(1))]))
            .await;
        let tx = env.manager.begin();
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s("b"))
            .update_expression("SET n = :two")
            .expression_attribute_values(":two", n(2))
            .send()
            .await
            .unwrap();
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s("a"))
            .update_expression("ADD foo :one")
            .expression_attribute_values(":one", n(1))
            .send()
            .await
            .unwrap();
        match tx.commit().await {
            Err(
                e @ Error::RequestRejected {
                    request_index: 1, ..
                },
            ) => {
                assert_eq!(
                    e.transaction_outcome(),
                    Some(dynamodb_transactions::TxOutcome::RolledBack)
                );
                assert!(matches!(e, Error::RequestRejected { message, .. } if !message.is_empty()));
            }
            other => panic!("expected RequestRejected, got {other:?}"),
        }
        assert_eq!(env.raw_get(&env.table, &key("b")).await.unwrap()["n"], n(1));
        assert_eq!(
            env.raw_get(&env.table, &key("a")).await.unwrap()["foo"],
            s("bar")
        );
        assert_clean(&env).await;

        // Applied at once (ALL_NEW): rejected at once, and rolled back.
        let tx = env.manager.begin();
        let err = tx
            .update_item()
            .table_name(&env.table)
            .key("Id", s("a"))
            .update_expression("ADD foo :one")
            .expression_attribute_values(":one", n(1))
            .return_values(ReturnValue::AllNew)
            .send()
            .await
            .unwrap_err();
        assert!(matches!(err, Error::RequestRejected { .. }), "{err:?}");
        assert!(tx.commit().await.unwrap_err().is_rolled_back());
        assert_clean(&env).await;
    }
}

#[tokio::test]
async fn bad_input_is_rejected_before_any_write() {
    let env = TestEnv::new("bad").await;
    env.raw_put(&env.table, item(&[("Id", s("a")), ("v", n(1))]))
        .await;
    let t = &env.table;
    let tx = env.manager.begin();
    let before = env.counter.total();
    let mut errors = Vec::new();
    macro_rules! expect_invalid {
        ($e:expr) => {
            match $e.await {
                Err(Error::InvalidRequest { reason }) => errors.push(reason),
                other => panic!(
                    "expected InvalidRequest from {}, got {other:?}",
                    stringify!($e)
                ),
            }
        };
    }
    expect_invalid!(
        tx.put_item()
            .table_name(t)
            .item("Id", s("x"))
            .item("_TxId", s("forged"))
            .send()
    );
    expect_invalid!(tx.put_item().table_name(t).item("v", n(1)).send()); // no key
    expect_invalid!(tx.put_item().table_name(t).item("Id", n(1)).send()); // wrong key type
    expect_invalid!(tx.put_item().table_name(t).item("Id", s("")).send()); // empty key
    expect_invalid!(
        tx.update_item()
            .table_name(t)
            .key("Id", s("a"))
            .key("extra", s("x"))
            .send()
    );
    expect_invalid!(tx.update_item().table_name(t).send()); // empty key
    expect_invalid!(
        tx.update_item()
            .table_name(t)
            .key("Id", s("a"))
            .update_expression("SET Id = :v")
            .expression_attribute_values(":v", s("b"))
            .send()
    );
    expect_invalid!(
        tx.update_item()
            .table_name(t)
            .key("Id", s("a"))
            .update_expression("SET _TxA = :v")
            .expression_attribute_values(":v", s("1"))
            .send()
    );
    expect_invalid!(
        tx.update_item()
            .table_name(t)
            .key("Id", s("a"))
            .update_expression("REMOVE #a")
            .expression_attribute_names("#a", "_TxId")
            .send()
    );
    expect_invalid!(
        tx.update_item()
            .table_name(t)
            .key("Id", s("a"))
            .update_expression("SET v = :v SET w = :v")
            .expression_attribute_values(":v", n(1))
            .send()
    );
    expect_invalid!(
        tx.update_item()
            .table_name(t)
            .key("Id", s("a"))
            .update_expression("SET v = :v")
            .send()
    ); // undefined value
    expect_invalid!(
        tx.update_item()
            .table_name(t)
            .key("Id", s("a"))
            .update_expression("SET v = :v")
            .expression_attribute_values(":v", n(1))
            .expression_attribute_values(":w", n(1))
            .send()
    ); // unused value
    expect_invalid!(
        tx.update_item()
            .table_name(t)
            .key("Id", s("a"))
            .update_expression("SET v = :v")
            .condition_expression("attribute_exists(_TxId)")
            .expression_attribute_values(":v", n(1))
            .send()
    );
    expect_invalid!(
        tx.update_item()
            .table_name(t)
            .key("Id", s("a"))
            .update_expression("SET #x = :v")
            .expression_attribute_names("#_TxQ", "v")
            .expression_attribute_values(":v", n(1))
            .send()
    );
    expect_invalid!(
        tx.put_item()
            .table_name(t)
            .item("Id", s("a"))
            .return_values(ReturnValue::AllNew)
            .send()
    );
    expect_invalid!(
        tx.delete_item()
            .table_name(t)
            .key("Id", s("a"))
            .return_values(ReturnValue::UpdatedNew)
            .send()
    );
    expect_invalid!(
        tx.put_item()
            .table_name(t)
            .item("Id", s("big"))
            .item("blob", s(&"z".repeat(400 * 1024)))
            .send()
    );
    expect_invalid!(tx.put_item().table_name("").item("Id", s("a")).send());
    expect_invalid!(tx.get_item().table_name(t).key("_TxId", s("a")).send());
    expect_invalid!(
        tx.get_item()
            .table_name(t)
            .key("Id", s("a"))
            .projection_expression("v, _TxG")
            .send()
    );
    expect_invalid!(
        env.manager
            .get_item()
            .table_name(t)
            .key("Id", s("a"))
            .isolation(dynamodb_transactions::IsolationLevel::ReadLock)
            .send()
    );
    let r = &env.range_table;
    // The range key of a hash+range table is missing.
    expect_invalid!(tx.put_item().table_name(r).item("Id", s("a")).send());
    expect_invalid!(tx.get_item().table_name(r).key("Id", s("a")).send());
    // An invalid update expression (unbalanced), an empty condition, a reserved name reached
    // through a name placeholder in a condition, a projection using an undefined placeholder.
    expect_invalid!(
        tx.update_item()
            .table_name(t)
            .key("Id", s("a"))
            .update_expression("SET v = if_not_exists(v, :z")
            .expression_attribute_values(":z", n(0))
            .send()
    );
    expect_invalid!(
        tx.delete_item()
            .table_name(t)
            .key("Id", s("a"))
            .condition_expression("  ")
            .send()
    );
    expect_invalid!(
        tx.delete_item()
            .table_name(t)
            .key("Id", s("a"))
            .condition_expression("attribute_exists(#l)")
            .expression_attribute_names("#l", "_TxA")
            .send()
    );
    expect_invalid!(
        tx.get_item()
            .table_name(t)
            .key("Id", s("a"))
            .projection_expression("#nope")
            .send()
    );
    // An unknown table is a typed error too.
    match tx
        .put_item()
        .table_name("no-such-table")
        .item("Id", s("a"))
        .send()
        .await
    {
        Err(Error::TableNotFound { table }) => assert_eq!(table, "no-such-table"),
        other => panic!("expected TableNotFound, got {other:?}"),
    }
    // A second write to the same item.
    tx.put_item()
        .table_name(t)
        .item("Id", s("dup"))
        .send()
        .await
        .unwrap();
    match tx
        .update_item()
        .table_name(t)
        .key("Id", s("dup"))
        .send()
        .await
    {
        Err(Error::DuplicateRequest { .. }) => {}
        other => panic!("expected DuplicateRequest, got {other:?}"),
    }
    assert!(errors.len() >= 27, "{} cases", errors.len());
    // Nothing was written: only key-schema lookups went out.
    let snapshot = env.counter.snapshot();
    assert_eq!(
        env.counter.total() - before,
        snapshot.get("DescribeTable").copied().unwrap_or(0),
        "{snapshot:?}"
    );
    tx.rollback().await.unwrap();
    assert!(
        env.scan_all(env.manager.transactions_table())
            .await
            .is_empty(),
        "no record written"
    );
    assert_eq!(
        env.raw_get(t, &key("a")).await.unwrap(),
        item(&[("Id", s("a")), ("v", n(1))])
    );
}

#[tokio::test]
async fn empty_transaction_commits_without_writing() {
    let env = TestEnv::new("empty").await;
    let tx = env.manager.begin();
    let id = tx.id().clone();
    tx.commit().await.unwrap();
    assert_eq!(env.counter.total(), 0);
    assert_eq!(env.tx_state(&id).await, None);
}

#[tokio::test]
async fn reads_see_the_transactions_own_writes() {
    for env in envs("ryw").await {
        env.raw_put(&env.table, item(&[("Id", s("a")), ("v", n(1))]))
            .await;
        env.raw_put(&env.table, item(&[("Id", s("d")), ("v", n(1))]))
            .await;
        let tx = env.manager.begin();
        let get = |id: &'static str| tx.get_item().table_name(&env.table).key("Id", s(id));
        // Lock upgrade: read, then write the same item.
        assert_eq!(get("a").send().await.unwrap().item.unwrap()["v"], n(1));
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s("a"))
            .update_expression("SET v = v + :one")
            .expression_attribute_values(":one", n(1))
            .send()
            .await
            .unwrap();
        assert_eq!(get("a").send().await.unwrap().item.unwrap()["v"], n(2));
        tx.put_item()
            .table_name(&env.table)
            .item("Id", s("p"))
            .item("v", n(7))
            .send()
            .await
            .unwrap();
        assert_eq!(get("p").send().await.unwrap().item.unwrap()["v"], n(7));
        tx.delete_item()
            .table_name(&env.table)
            .key("Id", s("d"))
            .send()
            .await
            .unwrap();
        assert_eq!(get("d").send().await.unwrap().item, None);
        assert_eq!(get("none").send().await.unwrap().item, None);
        // Outside the transaction, committed reads see none of it yet.
        let committed = env
            .manager
            .get_item()
            .table_name(&env.table)
            .key("Id", s("a"))
            .consistent_read(true)
            .send()
            .await
            .unwrap();
        assert_eq!(committed.item.unwrap()["v"], n(1));
        tx.commit().await.unwrap();
        assert_eq!(env.raw_get(&env.table, &key("a")).await.unwrap()["v"], n(2));
        assert_eq!(env.raw_get(&env.table, &key("p")).await.unwrap()["v"], n(7));
        assert!(env.raw_get(&env.table, &key("d")).await.is_none());
        assert!(
            env.raw_get(&env.table, &key("none")).await.is_none(),
            "read placeholder removed"
        );
        assert_clean(&env).await;
    }
}

#[tokio::test]
async fn n_item_update_costs_n_plus_two_requests() {
    let env = TestEnv::new("count").await;
    for i in 0..10 {
        env.raw_put(
            &env.table,
            item(&[("Id", s(&format!("k{i}"))), ("v", n(0))]),
        )
        .await;
    }
    // Warm the key-schema cache.
    env.manager
        .get_item()
        .table_name(&env.table)
        .key("Id", s("k0"))
        .send()
        .await
        .unwrap();
    env.counter.reset();
    let tx = env.manager.begin();
    for i in 0..10 {
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s(&format!("k{i}")))
            .update_expression("SET v = :one")
            .expression_attribute_values(":one", n(1))
            .send()
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    let c = env.counter.snapshot();
    assert_eq!(env.counter.total(), 12, "{c:?}");
    assert_eq!(c.get("PutItem"), Some(&1)); // the record
    assert_eq!(c.get("UpdateItem"), Some(&10)); // the locks
    assert_eq!(c.get("TransactWriteItems"), Some(&1)); // apply + unlock + commit
    for i in 0..10 {
        let it = env
            .raw_get(&env.table, &key(&format!("k{i}")))
            .await
            .unwrap();
        assert_eq!(it, item(&[("Id", s(&format!("k{i}"))), ("v", n(1))]));
    }
}

#[tokio::test]
async fn binary_and_nested_attributes_round_trip() {
    for env in envs("types").await {
        let blob = aws_sdk_dynamodb::primitives::Blob::new(b"\n\t\xc4\xa3\x00".to_vec());
        let nested = AttributeValue::M(
            [
                ("s".to_string(), s("x")),
                ("n".to_string(), n(1.5)),
                ("b".to_string(), AttributeValue::B(blob.clone())),
                (
                    "ss".to_string(),
                    AttributeValue::Ss(vec!["a".into(), "b".into()]),
                ),
                (
                    "ns".to_string(),
                    AttributeValue::Ns(vec!["1".into(), "2".into()]),
                ),
                ("bs".to_string(), AttributeValue::Bs(vec![blob.clone()])),
                ("bool".to_string(), AttributeValue::Bool(true)),
                ("null".to_string(), AttributeValue::Null(true)),
                (
                    "l".to_string(),
                    AttributeValue::L(vec![n(1), AttributeValue::L(vec![s("deep")])]),
                ),
            ]
            .into_iter()
            .collect(),
        );
        let full = item(&[
            ("Id", s("t")),
            ("m", nested.clone()),
            ("b", AttributeValue::B(blob.clone())),
        ]);
        let tx = env.manager.begin();
        tx.put_item()
            .table_name(&env.table)
            .set_item(Some(full.clone()))
            .send()
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(env.raw_get(&env.table, &key("t")).await.unwrap(), full);
        // Update it (the image carries every type) and roll back: restored exactly.
        let tx = env.manager.begin();
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s("t"))
            .update_expression("REMOVE m")
            .return_values(ReturnValue::AllNew)
            .send()
            .await
            .unwrap();
        tx.rollback().await.unwrap();
        assert_eq!(env.raw_get(&env.table, &key("t")).await.unwrap(), full);
    }
}

#[tokio::test]
async fn dropping_an_unfinished_transaction_rolls_it_back_in_the_background() {
    let env = TestEnv::with_settings("drop", |s| s.rollback_on_drop = true).await;
    env.raw_put(&env.table, item(&[("Id", s("a")), ("v", n(1))]))
        .await;
    let id = {
        let tx = env.manager.begin();
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s("a"))
            .update_expression("SET v = :two")
            .expression_attribute_values(":two", n(2))
            .return_values(ReturnValue::AllNew)
            .send()
            .await
            .unwrap();
        tx.id().clone()
        // dropped here, applied and locked
    };
    // The rollback runs on the runtime; wait for its outcome (bounded).
    let mut state = None;
    for _ in 0..100 {
        state = env
            .manager
            .transaction_state(&id)
            .await
            .unwrap()
            .map(|s| (s.state, s.finalized));
        if state == Some((TxState::RolledBack, true)) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(state, Some((TxState::RolledBack, true)));
    assert_eq!(
        env.raw_get(&env.table, &key("a")).await.unwrap(),
        item(&[("Id", s("a")), ("v", n(1))])
    );
}

#[tokio::test]
async fn a_committed_delete_not_yet_executed_reads_as_absent() {
    let env = TestEnv::with_settings("deldec", |s| s.one_shot_max_items = 0).await;
    env.raw_put(&env.table, item(&[("Id", s("d")), ("v", n(1))]))
        .await;
    env.manager
        .get_item()
        .table_name(&env.table)
        .key("Id", s("warm"))
        .send()
        .await
        .unwrap();
    env.counter.reset();
    let tx = env.manager.begin();
    let id = tx.id().clone();
    tx.delete_item()
        .table_name(&env.table)
        .key("Id", s("d"))
        .send()
        .await
        .unwrap();
    // record, lock, apply (marks the delete), flip; the coordinator dies before the unlock.
    env.faults
        .crash_at(5, dynamodb_transactions::fault::FaultMode::BeforeSend);
    // Committed, but the crash stops the cleanup: commit says "committed, not finished".
    let r = tx.commit().await;
    assert_eq!(
        r.as_ref().err().and_then(|e| e.transaction_outcome()),
        Some(dynamodb_transactions::TxOutcome::Committed)
    );
    assert!(
        matches!(
            r,
            Err(dynamodb_transactions::Error::AlreadyCommitted { .. })
        ),
        "{r:?}"
    );
    env.faults.disarm();
    assert_eq!(env.tx_state(&id).await, Some((TxState::Committed, false)));
    let raw = env.raw_get(&env.table, &key("d")).await.unwrap();
    assert_eq!(
        raw["_TxA"],
        s("D"),
        "the delete is marked, not executed: {raw:?}"
    );
    let committed = env
        .manager
        .get_item()
        .table_name(&env.table)
        .key("Id", s("d"))
        .send()
        .await
        .unwrap();
    assert_eq!(committed.item, None, "committed readers see it deleted");
    // Whoever completes it executes the delete.
    let (m2, _) = env.second_coordinator();
    m2.complete_transaction(&id).await.unwrap();
    assert!(env.raw_get(&env.table, &key("d")).await.is_none());
}

/// Throttles the response of the first request whose body contains `needle`, after DynamoDB applied
/// it: the SDK retries, and the retry meets the first attempt's effect.
#[derive(Debug, Clone)]
struct ThrottleFirstMatch {
    needle: String,
    fired: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

#[derive(Debug, Clone)]
struct Struck;

impl aws_smithy_types::config_bag::Storable for Struck {
    type Storer = aws_smithy_types::config_bag::StoreReplace<Self>;
}

impl aws_sdk_dynamodb::config::Intercept for ThrottleFirstMatch {
    fn name(&self) -> &'static str {
        "ThrottleFirstMatch"
    }

    fn read_before_transmit(
        &self,
        ctx: &aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
        _: &aws_sdk_dynamodb::config::RuntimeComponents,
        cfg: &mut aws_sdk_dynamodb::config::ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        let body = ctx.request().body().bytes().unwrap_or_default();
        if String::from_utf8_lossy(body).contains(&self.needle)
            && !self.fired.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            cfg.interceptor_state().store_put(Struck);
        }
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        ctx: &mut aws_sdk_dynamodb::config::interceptors::BeforeDeserializationInterceptorContextMut<
            '_,
        >,
        _: &aws_sdk_dynamodb::config::RuntimeComponents,
        cfg: &mut aws_sdk_dynamodb::config::ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        if cfg.load::<Struck>().is_some() {
            cfg.interceptor_state().unset::<Struck>();
            let resp = ctx.response_mut();
            *resp.status_mut() = 400u16.try_into().expect("status");
            *resp.body_mut() = aws_smithy_types::body::SdkBody::from(
                r#"{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"injected"}"#,
            );
            resp.headers_mut().remove("x-amz-crc32");
        }
        Ok(())
    }
}

/// An update asking for return values whose apply lands but whose response is throttled: the
/// SDK's retry finds the write applied, and the library must still answer what DynamoDB would have
/// (compared with DynamoDB's own answer to the same plain UpdateItem on a twin item).
#[tokio::test]
async fn return_values_survive_a_retried_apply() {
    let env = TestEnv::new("rv-retry").await;
    let before = |id: &str| {
        item(&[
            ("Id", s(id)),
            ("v", n(1)),
            ("w", s("gone")),
            ("keep", s("k")),
            (
                "m",
                AttributeValue::M(
                    [("a".to_string(), n(1)), ("b".to_string(), n(2))]
                        .into_iter()
                        .collect(),
                ),
            ),
        ])
    };
    let update = "SET v = :v, m.a = :a REMOVE w";
    for rv in [
        ReturnValue::UpdatedOld,
        ReturnValue::UpdatedNew,
        ReturnValue::AllNew,
    ] {
        let (ours, twin) = (
            format!("tx-{}", rv.as_str()),
            format!("twin-{}", rv.as_str()),
        );
        env.raw_put(&env.table, before(&ours)).await;
        env.raw_put(&env.table, before(&twin)).await;
        let expected = env
            .client
            .update_item()
            .table_name(&env.table)
            .key("Id", s(&twin))
            .update_expression(update)
            .expression_attribute_values(":v", n(2))
            .expression_attribute_values(":a", n(10))
            .return_values(rv.clone())
            .send()
            .await
            .unwrap()
            .attributes;
        let fired = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let m = dynamodb_transactions::TransactionManager::builder(client_with(vec![shared(
            ThrottleFirstMatch {
                needle: format!("\"ReturnValues\":\"{}\"", rv.as_str()),
                fired: fired.clone(),
            },
        )]))
        .transactions_table(env.manager.transactions_table())
        .images_table(env.manager.images_table())
        .configure(|s| s.rollback_on_drop = false)
        .build();
        let tx = m.begin();
        let got = tx
            .update_item()
            .table_name(&env.table)
            .key("Id", s(&ours))
            .update_expression(update)
            .expression_attribute_values(":v", n(2))
            .expression_attribute_values(":a", n(10))
            .return_values(rv.clone())
            .send()
            .await
            .unwrap();
        assert!(
            fired.load(std::sync::atomic::Ordering::SeqCst),
            "{rv:?}: not throttled"
        );
        let mut want = expected.unwrap_or_default();
        if rv == ReturnValue::AllNew {
            want.insert("Id".into(), s(&ours));
        }
        assert_eq!(got.attributes.unwrap_or_default(), want, "{rv:?}");
        tx.commit().await.unwrap();
        let mut stored = env.raw_get(&env.table, &key(&ours)).await.unwrap();
        stored.insert("Id".into(), s(&twin));
        assert_eq!(
            Some(stored),
            env.raw_get(&env.table, &key(&twin)).await,
            "{rv:?}"
        );
    }
}

// ---- Commit outcomes after a commit request may have landed (5xx answers, throttled actions) ----

use dynamodb_transactions::TransactionManager;
use dynamodb_transactions::fault::{FaultMode, RequestCounter, ServiceAnswer, ServiceFaults};

/// A second manager over `env`'s tables whose client answers through a [`ServiceFaults`];
/// `one_shot: false` commits in phases.
fn service_faulty(
    env: &TestEnv,
    one_shot: bool,
) -> (TransactionManager, ServiceFaults, RequestCounter) {
    let faults = ServiceFaults::new();
    let counter = RequestCounter::new();
    let m = TransactionManager::builder(client_with(vec![
        shared(counter.clone()),
        shared(faults.clone()),
    ]))
    .transactions_table(env.manager.transactions_table())
    .images_table(env.manager.images_table())
    .configure(|s| {
        s.rollback_on_drop = false;
        s.write_only_fast_path = false;
        if !one_shot {
            s.one_shot_max_items = 0;
        }
    })
    .build();
    (m, faults, counter)
}

async fn add_one(tx: &dynamodb_transactions::Transaction, table: &str, id: &str) {
    tx.update_item()
        .table_name(table)
        .key("Id", s(id))
        .update_expression("ADD n :one")
        .expression_attribute_values(":one", n(1))
        .send()
        .await
        .unwrap();
}

async fn counts(env: &TestEnv, ids: &[&str]) -> Vec<AttributeValue> {
    let mut out = Vec::new();
    for id in ids {
        let i = env.raw_get(&env.table, &key(id)).await.unwrap();
        assert!(!has_tx_attrs(&i), "lock attributes left: {i:?}");
        out.push(i["n"].clone());
    }
    out
}

/// The decisive commit request lands but DynamoDB answers 500 (with an error body, or none), to
/// the first attempt and to the SDK's retries of it (`count`). `commit` must learn the outcome
/// from the record: Ok, applied exactly once, never a retryable error for a committed transaction.
#[tokio::test]
async fn a_landed_commit_answered_with_a_5xx_is_reported_committed() {
    let env = TestEnv::new("c5xx").await;
    // (one-request commit?, operation of the decisive request, its number among the operation's
    // requests: in phases, two locks are UpdateItems before the flip)
    for (one_shot, op, at) in [(true, "TransactWriteItems", 1), (false, "UpdateItem", 3)] {
        for (answer, count) in [
            (ServiceAnswer::InternalServerError, 3),
            (ServiceAnswer::EmptyServerError, 3),
            (ServiceAnswer::InternalServerError, 1),
        ] {
            let what = format!("one_shot={one_shot} {answer:?} x{count}");
            let ids = [
                format!("a-{one_shot}-{count}"),
                format!("b-{one_shot}-{count}"),
            ];
            let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
            for id in &ids {
                env.raw_put(&env.table, item(&[("Id", s(id)), ("n", n(0))]))
                    .await;
            }
            let (m, faults, _) = service_faulty(&env, one_shot);
            let tx = m.begin();
            let tx_id = tx.id().clone();
            for id in &ids {
                add_one(&tx, &env.table, id).await;
            }
            faults.answer_after_send(op, at, count, answer.clone());
            let r = tx.commit().await;
            assert_eq!(faults.injected(), count, "{what}: fault did not strike");
            // The SDK retries a 500 itself (3 attempts in the harness): a retry that is not
            // answered by the fault meets the landed attempt's effect (a failed condition).
            let attempts = (count + 1).min(3);
            let others = if one_shot { 0 } else { 3 }; // two locks and the finalize
            assert_eq!(faults.requests_seen(), attempts + others, "{what}");
            assert!(r.is_ok(), "{what}: {r:?}");
            assert_eq!(
                m.transaction_state(&tx_id)
                    .await
                    .unwrap()
                    .map(|s| (s.state, s.finalized)),
                Some((TxState::Committed, true)),
                "{what}"
            );
            assert_eq!(
                counts(&env, &ids).await,
                vec![n(1), n(1)],
                "{what}: applied once"
            );
        }
    }
}

/// `run` over a commit answered 500 after landing: the work runs once and is applied once.
#[tokio::test]
async fn run_applies_a_landed_commit_answered_with_a_5xx_once() {
    let env = TestEnv::new("r5xx").await;
    env.raw_put(&env.table, item(&[("Id", s("r")), ("n", n(0))]))
        .await;
    let (m, faults, _) = service_faulty(&env, true);
    faults.answer_after_send(
        "TransactWriteItems",
        1,
        3,
        ServiceAnswer::InternalServerError,
    );
    let mut runs = 0;
    let table = env.table.clone();
    m.run(async |tx| {
        runs += 1;
        add_one(tx, &table, "r").await;
        Ok(())
    })
    .await
    .unwrap();
    assert_eq!(runs, 1);
    assert_eq!(counts(&env, &["r"]).await, vec![n(1)]);
}

/// A `TransactWriteItems` of the commit cancelled for throttling or conflict (before it is sent:
/// nothing lands; or after it landed: the answer lies) is transient: `run` commits, once.
#[tokio::test]
async fn run_retries_a_commit_cancelled_for_throttling() {
    let env = TestEnv::new("thr-run").await;
    let mut case = 0;
    for one_shot in [true, false] {
        for code in [
            "ThrottlingError",
            "ProvisionedThroughputExceeded",
            "TransactionConflict",
        ] {
            for (action, landed) in [(0, false), (1, false), (1, true)] {
                case += 1;
                let what = format!("one_shot={one_shot} {code} action={action} landed={landed}");
                let ids = [format!("a{case}"), format!("b{case}")];
                let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
                for id in &ids {
                    env.raw_put(&env.table, item(&[("Id", s(id)), ("n", n(0))]))
                        .await;
                }
                let (m, faults, _) = service_faulty(&env, one_shot);
                let answer = ServiceAnswer::Cancelled {
                    code: code.to_string(),
                    action,
                };
                if landed {
                    faults.answer_after_send("TransactWriteItems", 1, 1, answer);
                } else {
                    faults.answer_instead("TransactWriteItems", 1, 1, answer);
                }
                let table = env.table.clone();
                let r = m
                    .run(async |tx| {
                        for id in &ids {
                            add_one(tx, &table, id).await;
                        }
                        Ok(())
                    })
                    .await;
                assert_eq!(faults.injected(), 1, "{what}");
                assert!(r.is_ok(), "{what}: {r:?}");
                assert_eq!(counts(&env, &ids).await, vec![n(1), n(1)], "{what}");
            }
        }
    }
}

/// A commit throttled on every attempt: `commit` returns a retryable error, and the transaction is
/// consistent: nothing applied, and either rolled back or still pending (then a rollback cleans it).
#[tokio::test]
async fn a_commit_throttled_throughout_returns_a_retryable_error() {
    let env = TestEnv::new("thr-commit").await;
    for one_shot in [true, false] {
        let id = format!("t-{one_shot}");
        env.raw_put(&env.table, item(&[("Id", s(&id)), ("n", n(0))]))
            .await;
        let (m, faults, _) = service_faulty(&env, one_shot);
        let tx = m.begin();
        let tx_id = tx.id().clone();
        add_one(&tx, &env.table, &id).await;
        faults.answer_instead(
            "TransactWriteItems",
            1,
            1000,
            ServiceAnswer::Cancelled {
                code: "ThrottlingError".into(),
                action: 0,
            },
        );
        let err = tx.commit().await.unwrap_err();
        faults.disarm();
        assert!(err.is_retryable(), "one_shot={one_shot}: {err:?}");
        assert!(!err.is_undetermined(), "one_shot={one_shot}: {err:?}");
        // The outcome read from the error agrees with the record: rolled back, or nothing decided
        // (pending, or already rolled back by this commit).
        use dynamodb_transactions::TxOutcome;
        let outcome = err.transaction_outcome();
        match (
            m.transaction_state(&tx_id)
                .await
                .unwrap()
                .map(|s| (s.state, s.finalized)),
            outcome,
        ) {
            (
                Some((TxState::RolledBack, true)),
                Some(TxOutcome::RolledBack | TxOutcome::Pending),
            ) => {}
            (Some((TxState::Pending, false)), Some(TxOutcome::Pending)) => {
                m.rollback_transaction(&tx_id).await.unwrap()
            }
            other => panic!("one_shot={one_shot}: {other:?}: {err:?}"),
        }
        assert_eq!(
            counts(&env, &[&id]).await,
            vec![n(0)],
            "one_shot={one_shot}"
        );
    }
}

// ---- Lost responses to the record's creation and appends ----

/// The record's creation lands but its answer is lost; the caller retries the same call on the
/// same handle: the library recognises its own record (no `DuplicateRequest`), and the write is
/// applied once.
#[tokio::test]
async fn a_call_retried_after_a_lost_record_creation_is_applied_once() {
    let env = TestEnv::new("lost-create").await;
    env.raw_put(&env.table, item(&[("Id", s("x")), ("n", n(0))]))
        .await;
    // Cache the table's schema.
    env.manager
        .begin()
        .get_item()
        .table_name(&env.table)
        .key("Id", s("warm"))
        .send()
        .await
        .unwrap();
    let tx = env.manager.begin();
    let tx_id = tx.id().clone();
    let call = || {
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s("x"))
            .update_expression("ADD n :one")
            .expression_attribute_values(":one", n(1))
            .return_values(ReturnValue::UpdatedNew)
            .send()
    };
    env.faults
        .fail_operation_at("PutItem", 1, FaultMode::AfterSend);
    assert!(call().await.is_err());
    assert!(env.faults.struck());
    let out = call().await.unwrap();
    assert_eq!(out.attributes, Some(item(&[("n", n(1))])));
    tx.commit().await.unwrap();
    assert_eq!(counts(&env, &["x"]).await, vec![n(1)]);
    assert_eq!(env.tx_state(&tx_id).await, Some((TxState::Committed, true)));
}

/// A rollback after a lost answer to the record's creation (or a creation that never landed) rolls
/// the record back and finalizes it: never `Ok` with the record left pending.
#[tokio::test]
async fn a_rollback_after_a_lost_record_creation_leaves_nothing_pending() {
    let env = TestEnv::new("lost-create-rb").await;
    env.manager
        .begin()
        .get_item()
        .table_name(&env.table)
        .key("Id", s("warm"))
        .send()
        .await
        .unwrap();
    for mode in [FaultMode::AfterSend, FaultMode::BeforeSend] {
        let id = format!("y-{mode:?}");
        env.raw_put(&env.table, item(&[("Id", s(&id)), ("n", n(0))]))
            .await;
        let tx = env.manager.begin();
        let tx_id = tx.id().clone();
        env.faults.fail_operation_at("PutItem", 1, mode);
        let r = tx
            .update_item()
            .table_name(&env.table)
            .key("Id", s(&id))
            .update_expression("ADD n :one")
            .expression_attribute_values(":one", n(1))
            .return_values(ReturnValue::AllNew)
            .send()
            .await;
        assert!(r.is_err() && env.faults.struck(), "{mode:?}");
        tx.rollback().await.unwrap();
        let state = env
            .manager
            .transaction_state(&tx_id)
            .await
            .unwrap()
            .map(|s| (s.state, s.finalized));
        assert!(
            state == Some((TxState::RolledBack, true))
                || (mode == FaultMode::BeforeSend && state.is_none()),
            "{mode:?}: {state:?}"
        );
        assert_eq!(counts(&env, &[&id]).await, vec![n(0)], "{mode:?}");
    }
}

/// A record written over several requests (the header, then chunk rows) whose second write fails
/// (lost, or never sent), after which a second handle of the same transaction appends: the first
/// handle recognises the requests it had recorded and commits each once.
#[tokio::test]
async fn a_chunked_record_cut_short_then_appended_by_a_second_handle_commits_once() {
    let env = TestEnv::new("lost-chunk").await;
    env.manager
        .begin()
        .get_item()
        .table_name(&env.table)
        .key("Id", s("warm"))
        .send()
        .await
        .unwrap();
    let blob = "z".repeat(120_000);
    for mode in [FaultMode::BeforeSend, FaultMode::AfterSend] {
        let big: Vec<String> = (0..3).map(|i| format!("big{i}-{mode:?}")).collect();
        let (mine, theirs) = (format!("mine-{mode:?}"), format!("theirs-{mode:?}"));
        let tx = env.manager.begin();
        let tx_id = tx.id().clone();
        for id in &big {
            tx.put_item()
                .table_name(&env.table)
                .item("Id", s(id))
                .item("blob", s(&blob))
                .send()
                .await
                .unwrap();
        }
        // Recording 3 × 120 KB: the header takes two, a TransactWriteItems adds a chunk row.
        env.faults.fail_operation_at("TransactWriteItems", 1, mode);
        let r = tx
            .get_item()
            .table_name(&env.table)
            .key("Id", s(&mine))
            .send()
            .await;
        assert!(r.is_err() && env.faults.struck(), "{mode:?}: {r:?}");
        let other = env.manager.resume(&tx_id).await.unwrap();
        other
            .get_item()
            .table_name(&env.table)
            .key("Id", s(&theirs))
            .send()
            .await
            .unwrap();
        other.abandon();
        tx.commit().await.unwrap();
        assert_eq!(
            env.tx_state(&tx_id).await,
            Some((TxState::Committed, true)),
            "{mode:?}"
        );
        for id in &big {
            let i = env.raw_get(&env.table, &key(id)).await.unwrap();
            assert!(!has_tx_attrs(&i), "{mode:?}: {id} still locked");
            assert_eq!(i["blob"], s(&blob));
        }
        for id in [&mine, &theirs] {
            assert_eq!(
                env.raw_get(&env.table, &key(id)).await,
                None,
                "{mode:?}: {id}"
            );
        }
    }
}

/// Waits until the background task a dropped handle may have spawned had every chance to run.
async fn let_background_tasks_run() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}

/// Finding 9: a handle from `resume` that sent nothing must not decide anything when dropped,
/// even with `rollback_on_drop` (the default): another coordinator is driving the transaction.
#[tokio::test]
async fn dropping_a_resumed_handle_that_wrote_nothing_leaves_the_transaction_alone() {
    let env = TestEnv::with_settings("dropres", |s| s.rollback_on_drop = true).await;
    env.raw_put(&env.table, item(&[("Id", s("a")), ("v", n(1))]))
        .await;
    // Coordinator A records the transaction and locks the item, and stays live.
    let a = env.manager.begin();
    let id = a.id().clone();
    a.update_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .update_expression("SET v = :two")
        .expression_attribute_values(":two", n(2))
        .return_values(ReturnValue::AllOld)
        .send()
        .await
        .unwrap();
    // B inspects it through the API and is dropped without doing anything.
    let b = env.manager.resume(&id).await.unwrap();
    assert_eq!(b.id(), &id);
    drop(b);
    let_background_tasks_run().await;
    assert_eq!(
        env.tx_state(&id).await,
        Some((TxState::Pending, false)),
        "the dropped inspection handle decided the transaction"
    );
    a.commit().await.unwrap();
    assert_eq!(
        env.raw_get(&env.table, &key("a")).await.unwrap(),
        item(&[("Id", s("a")), ("v", n(2))])
    );
    // A handle that did write (here: locked an item for a read) still rolls back on drop.
    env.raw_put(&env.table, item(&[("Id", s("b")), ("v", n(1))]))
        .await;
    let c = env.manager.begin();
    let id = c.id().clone();
    c.get_item()
        .table_name(&env.table)
        .key("Id", s("b"))
        .send()
        .await
        .unwrap();
    let resumed = env.manager.resume(&id).await.unwrap();
    drop(c);
    drop(resumed);
    let mut state = None;
    for _ in 0..100 {
        state = env
            .manager
            .transaction_state(&id)
            .await
            .unwrap()
            .map(|s| (s.state, s.finalized));
        if state == Some((TxState::RolledBack, true)) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(state, Some((TxState::RolledBack, true)));
    assert!(!has_tx_attrs(
        &env.raw_get(&env.table, &key("b")).await.unwrap()
    ));
}

/// A manager over `env`'s tables with its own client (no faults): another coordinator.
fn other_coordinator(env: &TestEnv, phased: bool) -> dynamodb_transactions::TransactionManager {
    dynamodb_transactions::TransactionManager::builder(client())
        .transactions_table(env.manager.transactions_table())
        .images_table(env.manager.images_table())
        .configure(|s| {
            s.rollback_on_drop = false;
            if phased {
                s.one_shot_max_items = 0;
            }
        })
        .build()
}

/// An item whose before-image is too large to embed (> 64 KB): it goes to the images table.
fn big_item(id: &str) -> dynamodb_transactions::Item {
    item(&[("Id", s(id)), ("v", n(1)), ("big", s(&"x".repeat(70_000)))])
}

/// Writes the big item `id` (v = 1) and begins a transaction that sets its `v` to 2.
async fn begin_big_item_update(env: &TestEnv, id: &str) -> dynamodb_transactions::Transaction {
    env.raw_put(&env.table, big_item(id)).await;
    let tx = env.manager.begin();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s(id))
        .update_expression("SET v = :v")
        .expression_attribute_values(":v", n(2))
        .send()
        .await
        .unwrap();
    tx
}

/// A phased commit of `SET v = :v` on the big item `id` that crashes (as a process would) after
/// saving the before-image in the images table and before applying: the item is locked, not
/// applied, and one image exists.
async fn crash_after_image_save(env: &TestEnv, id: &str) -> dynamodb_transactions::TxId {
    let tx = begin_big_item_update(env, id).await;
    let tx_id = tx.id().clone();
    // Record (1), lock (2), image PutItem (3), apply (4).
    env.faults
        .crash_at(4, dynamodb_transactions::fault::FaultMode::BeforeSend);
    assert!(tx.commit().await.is_err());
    env.faults.disarm();
    let raw = env.raw_get(&env.table, &key(id)).await.unwrap();
    assert_eq!(raw["_TxId"], s(tx_id.as_str()), "locked");
    assert!(!raw.contains_key("_TxA"), "not applied");
    assert_eq!(
        env.scan_all(env.manager.images_table()).await.len(),
        1,
        "the image was saved"
    );
    tx_id
}

async fn assert_no_images(env: &TestEnv, what: &str) {
    let images = env.scan_all(env.manager.images_table()).await;
    assert!(images.is_empty(), "{what}: images left: {}", images.len());
}

async fn assert_big_item(env: &TestEnv, id: &str, v: i64) {
    let raw = env.raw_get(&env.table, &key(id)).await.unwrap();
    assert!(!has_tx_attrs(&raw), "{id}: lock attributes left");
    assert_eq!(raw["v"], n(v), "{id}");
    assert_eq!(raw["big"], big_item(id)["big"], "{id}");
}

/// Finding 10(b): an images-table image saved by a coordinator that crashed before applying is
/// removed by whoever finishes the transaction: a resumed commit (one request or phased), a resumed
/// rollback, the sweeper (its scan of the images table turned off, so the completion itself must
/// do it).
#[tokio::test]
async fn an_image_saved_before_a_crash_is_removed_by_whoever_finishes() {
    let env = TestEnv::with_settings("imgcrash", |s| s.one_shot_max_items = 0).await;

    let id = crash_after_image_save(&env, "commit1").await;
    other_coordinator(&env, false)
        .resume(&id)
        .await
        .unwrap()
        .commit()
        .await
        .unwrap();
    assert_big_item(&env, "commit1", 2).await;
    assert_no_images(&env, "resume + one-request commit").await;

    let id = crash_after_image_save(&env, "commitph").await;
    other_coordinator(&env, true)
        .resume(&id)
        .await
        .unwrap()
        .commit()
        .await
        .unwrap();
    assert_big_item(&env, "commitph", 2).await;
    assert_no_images(&env, "resume + phased commit").await;

    let id = crash_after_image_save(&env, "rollback").await;
    other_coordinator(&env, false)
        .rollback_transaction(&id)
        .await
        .unwrap();
    assert_big_item(&env, "rollback", 1).await;
    assert_no_images(&env, "resume + rollback").await;

    let id = crash_after_image_save(&env, "sweep").await;
    other_coordinator(&env, false)
        .sweep(
            &dynamodb_transactions::sweeper::SweepOptions::new()
                .rollback_after(std::time::Duration::ZERO)
                .sweep_images(false),
        )
        .await
        .unwrap();
    assert_eq!(env.tx_state(&id).await, Some((TxState::RolledBack, true)));
    assert_big_item(&env, "sweep", 1).await;
    assert_no_images(&env, "sweep").await;
}

/// Finding 10(b): the answer to the image save is lost; the transaction is finished by a resumed
/// commit, whose save must not leave a second image behind.
#[tokio::test]
async fn a_lost_answer_to_the_image_save_leaves_no_second_image() {
    let env = TestEnv::with_settings("imglost", |s| s.one_shot_max_items = 0).await;
    let tx = begin_big_item_update(&env, "a").await;
    let id = tx.id().clone();
    // Record (1), lock (2), image PutItem (3): it lands, its answer is lost.
    env.faults
        .fail_once_at(3, dynamodb_transactions::fault::FaultMode::AfterSend);
    assert!(tx.commit().await.is_err());
    assert!(env.faults.struck());
    env.manager
        .resume(&id)
        .await
        .unwrap()
        .commit()
        .await
        .unwrap();
    assert_big_item(&env, "a", 2).await;
    assert_no_images(&env, "after the retried save").await;
}

/// Finding 10(b): a crash on the request that deletes the image (phased commit; rollback of an
/// item applied at once for `ReturnValues`), then the transaction is finished from elsewhere.
#[tokio::test]
async fn a_crash_on_the_image_delete_leaves_no_image() {
    let env = TestEnv::with_settings("imgdel", |s| s.one_shot_max_items = 0).await;
    let tx = begin_big_item_update(&env, "c").await;
    let id = tx.id().clone();
    // Record (1), lock (2), image (3), apply (4), flip (5), unlock (6), image delete (7).
    env.faults
        .crash_at(7, dynamodb_transactions::fault::FaultMode::BeforeSend);
    let _ = tx.commit().await;
    env.faults.disarm();
    assert_eq!(
        env.manager
            .transaction_state(&id)
            .await
            .unwrap()
            .map(|s| s.state),
        Some(TxState::Committed)
    );
    let _ = other_coordinator(&env, true)
        .resume(&id)
        .await
        .unwrap()
        .commit()
        .await;
    assert_eq!(env.tx_state(&id).await, Some((TxState::Committed, true)));
    assert_big_item(&env, "c", 2).await;
    assert_no_images(&env, "commit").await;

    env.raw_put(&env.table, big_item("r")).await;
    let tx = env.manager.begin();
    let id = tx.id().clone();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("r"))
        .update_expression("SET v = :v")
        .expression_attribute_values(":v", n(2))
        .return_values(ReturnValue::AllNew)
        .send()
        .await
        .unwrap();
    assert!(
        env.raw_get(&env.table, &key("r")).await.unwrap()["_TxI"]
            .as_s()
            .is_ok(),
        "applied with an images-table image"
    );
    // Decide (1), read the item (2), load the image (3), restore (4), image delete (5).
    env.faults
        .crash_at(5, dynamodb_transactions::fault::FaultMode::BeforeSend);
    let _ = tx.rollback().await;
    env.faults.disarm();
    other_coordinator(&env, false)
        .rollback_transaction(&id)
        .await
        .unwrap();
    assert_eq!(env.tx_state(&id).await, Some((TxState::RolledBack, true)));
    assert_big_item(&env, "r", 1).await;
    assert_no_images(&env, "rollback").await;
}

/// Finding 10(c): the one-request commit finalizes the record in its `TransactWriteItems`; the
/// record's TTL attribute must travel in it too, not in a later best-effort write a crash skips.
#[tokio::test]
async fn the_one_request_commit_writes_the_record_ttl_in_the_commit() {
    let env = TestEnv::with_settings("ttl1", |s| {
        s.record_ttl = Some(std::time::Duration::from_secs(86_400))
    })
    .await;
    env.raw_put(&env.table, item(&[("Id", s("a")), ("v", n(1))]))
        .await;
    let tx = env.manager.begin();
    let id = tx.id().clone();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .update_expression("SET v = :v")
        .expression_attribute_values(":v", n(2))
        .send()
        .await
        .unwrap();
    // Record (1), lock (2), the one-request commit (3); the process dies right after it.
    env.faults
        .crash_at(4, dynamodb_transactions::fault::FaultMode::BeforeSend);
    tx.commit().await.unwrap();
    env.faults.disarm();
    assert_eq!(env.counter.get("TransactWriteItems"), 1);
    assert_eq!(env.tx_state(&id).await, Some((TxState::Committed, true)));
    let header = env
        .scan_all(env.manager.transactions_table())
        .await
        .into_iter()
        .find(|r| r["_TxId"] == s(id.as_str()) && r["_TxN"] == n(0))
        .unwrap();
    let expires: u64 = header
        .get("_TxE")
        .expect("the finalized record carries its TTL")
        .as_n()
        .unwrap()
        .parse()
        .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(
        expires > now + 86_000 && expires <= now + 86_400,
        "{expires}"
    );
}

/// A manager over `env`'s tables with its own client and the given settings.
fn coordinator_with(
    env: &TestEnv,
    f: impl FnOnce(&mut dynamodb_transactions::Settings),
) -> dynamodb_transactions::TransactionManager {
    dynamodb_transactions::TransactionManager::builder(client())
        .transactions_table(env.manager.transactions_table())
        .images_table(env.manager.images_table())
        .configure(|s| {
            s.rollback_on_drop = false;
            s.write_only_fast_path = false;
            f(s)
        })
        .build()
}

/// Finding 11: an update whose expression makes the item grow (`SET b = a` copying a large
/// attribute) to ~360 KB, which DynamoDB accepts, commits on every path: the before-image estimate
/// must count the growth (an embedded 60 KB image would push the applied item past 400 KB).
#[tokio::test]
async fn an_update_that_copies_a_large_attribute_commits_on_every_path() {
    let env = TestEnv::new("grow").await;
    let a = s(&"y".repeat(60_000));
    let update = "SET b = a, c = a, d = a, e = a, f = a";
    // What DynamoDB itself does with the plain update.
    env.raw_put(&env.table, item(&[("Id", s("twin")), ("a", a.clone())]))
        .await;
    env.client
        .update_item()
        .table_name(&env.table)
        .key("Id", s("twin"))
        .update_expression(update)
        .send()
        .await
        .expect("DynamoDB accepts the plain update");
    let paths: Vec<(&str, dynamodb_transactions::TransactionManager, bool)> = vec![
        ("one-request", coordinator_with(&env, |_| {}), false),
        (
            "phased",
            coordinator_with(&env, |s| s.one_shot_max_items = 0),
            false,
        ),
        ("return-values", coordinator_with(&env, |_| {}), true),
        (
            "write-only",
            coordinator_with(&env, |s| s.write_only_fast_path = true),
            false,
        ),
    ];
    for (path, m, rv) in paths {
        env.raw_put(&env.table, item(&[("Id", s(path)), ("a", a.clone())]))
            .await;
        let tx = m.begin();
        let mut b = tx
            .update_item()
            .table_name(&env.table)
            .key("Id", s(path))
            .update_expression(update);
        if rv {
            b = b.return_values(ReturnValue::AllNew);
        }
        let r = b.send().await;
        let r = match r {
            Ok(_) => tx.commit().await,
            Err(e) => Err(e),
        };
        assert!(r.is_ok(), "{path}: {r:?}");
        let got = env.raw_get(&env.table, &key(path)).await.unwrap();
        assert!(!has_tx_attrs(&got), "{path}");
        for attr in ["b", "c", "d", "e", "f"] {
            assert_eq!(got.get(attr), Some(&a), "{path}: {attr}");
        }
        assert_no_images(&env, path).await;
    }
}

/// An item of exactly `size` bytes by DynamoDB's rules (`Id` + `blob`).
fn item_of_size(id: &str, size: usize) -> dynamodb_transactions::Item {
    let fixed = "Id".len() + id.len() + "blob".len();
    item(&[("Id", s(id)), ("blob", s(&"z".repeat(size - fixed)))])
}

const MAX_ITEM: usize = 400 * 1024;

fn assert_room_error(what: &str, r: Result<impl std::fmt::Debug, Error>) {
    match r {
        Err(Error::InvalidRequest { reason }) => {
            assert!(
                reason.contains("400 KB") && reason.contains("bytes of room"),
                "{what}: the error must name the limit and the room needed: {reason}"
            );
        }
        other => panic!("{what}: expected InvalidRequest, got {other:?}"),
    }
}

/// Finding 11: items near DynamoDB's 400 KB limit. A put DynamoDB accepts and that leaves the
/// room the library needs is accepted; an item within a few dozen bytes of the limit cannot carry a
/// lock (not even a read lock): the library says so with a typed error naming the room it needs,
/// writes nothing to the item and leaves nothing pending.
#[tokio::test]
async fn items_near_the_size_limit() {
    for env in envs("near").await {
        // A put 1,000 bytes under the limit: DynamoDB accepts it, and the library needs less.
        let tx = env.manager.begin();
        let big = item_of_size("put", MAX_ITEM - 1_000);
        tx.put_item()
            .table_name(&env.table)
            .set_item(Some(big.clone()))
            .send()
            .await
            .expect("a put leaving 1,000 bytes of room");
        tx.commit().await.unwrap();
        assert_eq!(env.raw_get(&env.table, &key("put")).await, Some(big));
        // A put 20 bytes under the limit: the library cannot lock it; rejected before any write.
        let tx = env.manager.begin();
        let before = env.counter.total();
        assert_room_error(
            "put",
            tx.put_item()
                .table_name(&env.table)
                .set_item(Some(item_of_size("put2", MAX_ITEM - 20)))
                .send()
                .await,
        );
        assert_eq!(env.counter.total(), before, "nothing sent");
        tx.rollback().await.unwrap();

        // An existing item 30 bytes under the limit.
        let near = item_of_size("near", MAX_ITEM - 30);
        env.raw_put(&env.table, near.clone()).await;
        let tx = env.manager.begin();
        let id = tx.id().clone();
        assert_room_error(
            "read lock",
            tx.get_item()
                .table_name(&env.table)
                .key("Id", s("near"))
                .send()
                .await,
        );
        assert_eq!(
            env.raw_get(&env.table, &key("near")).await,
            Some(near.clone())
        );
        tx.rollback().await.unwrap();
        assert_eq!(
            env.manager
                .transaction_state(&id)
                .await
                .unwrap()
                .map(|s| s.state),
            Some(TxState::RolledBack)
        );

        let tx = env.manager.begin();
        let id = tx.id().clone();
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s("near"))
            .update_expression("SET v = :v")
            .expression_attribute_values(":v", n(1))
            .send()
            .await
            .unwrap();
        assert_room_error("write", tx.commit().await);
        assert_eq!(
            env.raw_get(&env.table, &key("near")).await,
            Some(near.clone())
        );
        assert_ne!(
            env.manager
                .transaction_state(&id)
                .await
                .unwrap()
                .map(|s| s.state),
            Some(TxState::Pending),
            "nothing left pending"
        );
        assert_clean(&env).await;
    }
}

/// Finding 11: an update whose result DynamoDB would store, but which leaves less room than the
/// lock attributes need while the item is locked and applied, gets the same answer on every path
/// that locks: rejected (rolled back) with an error that names the room, the item unchanged. (The
/// one-request path used to accept it and the phased path to reject it.)
#[tokio::test]
async fn an_update_into_the_lock_room_gets_the_same_answer_on_every_path() {
    for env in envs("room").await {
        let start = item_of_size("r", MAX_ITEM - 5_000);
        env.raw_put(&env.table, start.clone()).await;
        // `v` (1 + 4,949 bytes) takes the item to 50 bytes under the limit.
        let v = s(&"q".repeat(4_949));
        env.raw_put(&env.table, with_id(&start, "twin")).await;
        env.client
            .update_item()
            .table_name(&env.table)
            .key("Id", s("twin"))
            .update_expression("SET v = :v")
            .expression_attribute_values(":v", v.clone())
            .send()
            .await
            .expect("DynamoDB accepts the plain update");
        let tx = env.manager.begin();
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s("r"))
            .update_expression("SET v = :v")
            .expression_attribute_values(":v", v.clone())
            .send()
            .await
            .unwrap();
        match tx.commit().await {
            Err(Error::RequestRejected { message, .. }) => {
                assert!(message.contains("bytes of room"), "{message}")
            }
            other => panic!("expected RequestRejected, got {other:?}"),
        }
        assert_eq!(env.raw_get(&env.table, &key("r")).await, Some(start));
        let _ = env
            .client
            .delete_item()
            .table_name(&env.table)
            .key("Id", s("twin"))
            .send()
            .await;
        assert_clean(&env).await;
    }
}

fn with_id(i: &dynamodb_transactions::Item, id: &str) -> dynamodb_transactions::Item {
    let mut i = i.clone();
    i.insert("Id".into(), s(id));
    i
}
