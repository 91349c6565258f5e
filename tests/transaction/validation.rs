//! Validation and conditions: a false condition or a request DynamoDB rejects rolls the whole
//! transaction back; bad input is refused before anything is written.

use aws_sdk_dynamodb::types::ReturnValue;
use dynamodb_transactions::{Error, TxState};

use crate::common::*;
use crate::{assert_clean, envs};

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
        Err(Error::TableNotFound { table, role }) => {
            assert_eq!(table, "no-such-table");
            assert_eq!(role, dynamodb_transactions::TableRole::Other);
        }
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
