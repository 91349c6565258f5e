//! Numbers as real DynamoDB answers with them. DynamoDB canonicalises every number (`1.50` comes
//! back as `1.5`); DynamoDB Local returns numbers written by `UpdateItem` as they were sent. Every
//! client in this binary answers through `fault::CanonicalNumbers` (see
//! `common::canonical_numbers_always`), and every lock stamp ends in 0 (about one in ten does in
//! production), so these tests see what production sees.

mod common;

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use common::*;
use dynamodb_transactions::{Error, TxState, to_item};
use serde::{Deserialize, Serialize};

/// `{Id: id, RangeAttr: range}` (the range table's key; `range` spelled as given).
fn rkey(id: &str, range: &str) -> dynamodb_transactions::Item {
    item(&[("Id", s(id)), ("RangeAttr", n(range))])
}

/// The rewriter does what DynamoDB does, and DynamoDB Local alone does not: a number written by
/// `UpdateItem` comes back canonical on every path (GetItem, ReturnValues, the item of a failed
/// condition), in `N`, in `NS` and nested in `M`/`L`, also under an attribute named `N`.
#[tokio::test]
async fn the_rewriter_answers_numbers_as_dynamodb_does() {
    let numbers = canonical_numbers_always();
    let env = TestEnv::new("num-rw").await;
    let local = local_client();
    let k = key("a");
    let update = |c: &aws_sdk_dynamodb::Client| {
        c.update_item()
            .table_name(&env.table)
            .set_key(Some(k.clone()))
            .update_expression("SET v = :v, #n = :m, ns = :ns, l = :l")
            .expression_attribute_names("#n", "N")
            .expression_attribute_values(":v", n("1.50"))
            .expression_attribute_values(
                ":m",
                AttributeValue::M(item(&[("N", n("007")), ("S", s("1.50"))])),
            )
            .expression_attribute_values(
                ":ns",
                AttributeValue::Ns(vec!["2.0".into(), "-0.50".into()]),
            )
            .expression_attribute_values(":l", AttributeValue::L(vec![n("1.0E+2"), s("00")]))
    };
    let canonical = item(&[
        ("Id", s("a")),
        ("v", n("1.5")),
        (
            "N",
            AttributeValue::M(item(&[("N", n("7")), ("S", s("1.50"))])),
        ),
        ("l", AttributeValue::L(vec![n("100"), s("00")])),
    ]);
    let same = |got: &dynamodb_transactions::Item| {
        let mut got = got.clone();
        let mut ns: Vec<String> = got.remove("ns").unwrap().as_ns().unwrap().clone();
        ns.sort();
        assert_eq!(ns, vec!["-0.5".to_string(), "2".to_string()]);
        assert_eq!(got, canonical);
    };

    // DynamoDB Local alone: as sent (if this fails, Local now canonicalises and the rewriter is moot).
    update(&local).send().await.unwrap();
    let raw = local
        .get_item()
        .table_name(&env.table)
        .set_key(Some(k.clone()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    assert_eq!(raw["v"], n("1.50"));
    assert_eq!(raw["N"].as_m().unwrap()["N"], n("007"));

    // Through the rewriter: canonical on every path.
    let before = numbers.rewritten();
    same(&env.raw_get(&env.table, &k).await.unwrap());
    let all_new = update(&env.client)
        .return_values(ReturnValue::AllNew)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
    same(&all_new);
    let failed = update(&env.client)
        .condition_expression("attribute_not_exists(v)")
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .send()
        .await
        .unwrap_err();
    let found = failed
        .as_service_error()
        .and_then(|e| match e {
            aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(c) => {
                c.item().cloned()
            }
            _ => None,
        })
        .expect("the item of the failed condition");
    same(&found);
    let scanned = env.scan_all(&env.table).await;
    assert_eq!(scanned.len(), 1);
    same(&scanned[0]);
    // Five numbers per answer (v, N.N, two in ns, one in l), four answers.
    assert!(numbers.rewritten() >= before + 4 * 5);
}

/// Regression (finding 3): a lock stamp ending in 0 comes back from DynamoDB without that 0. The
/// interactive apply of an update with a false condition then found "another lock" where its own
/// was, and reported `RolledBack` while leaving the transaction pending and the item locked.
#[tokio::test]
async fn a_false_condition_under_a_stamp_ending_in_zero_is_a_condition_failure() {
    canonical_numbers_always();
    let env = TestEnv::new("num-stamp").await;
    let original = item(&[("Id", s("a")), ("v", n(1))]);
    env.raw_put(&env.table, original.clone()).await;
    let tx = env.manager.begin();
    let id = tx.id().clone();
    let result = tx
        .update_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .update_expression("SET v = v + :one")
        .condition_expression("v = :two")
        .expression_attribute_values(":one", n(1))
        .expression_attribute_values(":two", n(2))
        .return_values(ReturnValue::AllNew)
        .send()
        .await;
    match result {
        Err(Error::ConditionFailed {
            tx_id,
            request_index: 0,
            item: Some(found),
            ..
        }) => {
            assert_eq!(tx_id, id);
            assert_eq!(found, original);
        }
        other => panic!("expected ConditionFailed, got {other:?}"),
    }
    // Rolled back consistently: record decided and finalized, item unlocked and unchanged.
    assert_eq!(env.tx_state(&id).await, Some((TxState::RolledBack, true)));
    assert_eq!(env.raw_get(&env.table, &key("a")).await, Some(original));
    assert!(matches!(tx.commit().await, Err(Error::RolledBack { .. })));

    // A true condition under such a stamp applies and commits.
    let tx = env.manager.begin();
    let out = tx
        .update_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .update_expression("SET v = v + :one")
        .condition_expression("v = :v")
        .expression_attribute_values(":one", n(1))
        .expression_attribute_values(":v", n(1))
        .return_values(ReturnValue::AllNew)
        .send()
        .await
        .unwrap();
    assert_eq!(out.attributes().unwrap()["v"], n(2));
    tx.commit().await.unwrap();
    let raw = env.raw_get(&env.table, &key("a")).await.unwrap();
    assert_eq!(raw, item(&[("Id", s("a")), ("v", n(2))]));
}

/// One item, two spellings of its numeric key: the transaction treats them as one item (one lock,
/// a second write is a duplicate, a read sees the transaction's own write), and a resumed handle
/// that reads the keys back from the record (canonicalised by DynamoDB) finishes it.
#[tokio::test]
async fn spellings_of_a_numeric_key_are_one_item() {
    canonical_numbers_always();
    let env = TestEnv::new("num-key").await;
    env.raw_put(
        &env.range_table,
        item(&[("Id", s("a")), ("RangeAttr", n("1.5")), ("v", n(1))]),
    )
    .await;
    let tx = env.manager.begin();
    let id = tx.id().clone();
    // Applied at once (ReturnValues): locked and written under the spelling `1.50`.
    let out = tx
        .update_item()
        .table_name(&env.range_table)
        .set_key(Some(rkey("a", "1.50")))
        .update_expression("SET v = v + :one")
        .expression_attribute_values(":one", n(1))
        .return_values(ReturnValue::UpdatedNew)
        .send()
        .await
        .unwrap();
    assert_eq!(out.attributes().unwrap()["v"], n(2));
    let dup = tx
        .put_item()
        .table_name(&env.range_table)
        .set_item(Some(item(&[("Id", s("a")), ("RangeAttr", n("15e-1"))])))
        .send()
        .await;
    assert!(
        matches!(dup, Err(Error::DuplicateRequest { .. })),
        "{dup:?}"
    );
    let seen = tx
        .get_item()
        .table_name(&env.range_table)
        .set_key(Some(rkey("a", "0001.5")))
        .send()
        .await
        .unwrap();
    assert_eq!(seen.item().unwrap()["v"], n(2));
    // Another key of the same transaction, recorded and locked (ReturnValues) under `2.0`.
    tx.put_item()
        .table_name(&env.range_table)
        .set_item(Some(item(&[
            ("Id", s("b")),
            ("RangeAttr", n("2.0")),
            ("v", n(7)),
        ])))
        .return_values(ReturnValue::AllOld)
        .send()
        .await
        .unwrap();
    tx.get_item()
        .table_name(&env.range_table)
        .set_key(Some(rkey("b", "2")))
        .send()
        .await
        .unwrap();

    // A second coordinator resumes from the record and commits.
    let (other, _) = env.second_coordinator();
    let resumed = other.resume(&id).await.unwrap();
    resumed.commit().await.unwrap();
    assert_eq!(env.tx_state(&id).await, Some((TxState::Committed, true)));
    let items = env.scan_all(&env.range_table).await;
    assert_eq!(items.len(), 2, "{items:?}");
    for i in &items {
        assert!(!has_tx_attrs(i), "{i:?}");
    }
    assert_eq!(
        env.raw_get(&env.range_table, &rkey("a", "1.5"))
            .await
            .unwrap()["v"],
        n(2)
    );
    assert_eq!(
        env.raw_get(&env.range_table, &rkey("b", "2"))
            .await
            .unwrap()["v"],
        n(7)
    );
    // The first handle learns the outcome it asked for.
    tx.commit().await.unwrap();
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Row {
    #[serde(rename = "Id")]
    id: String,
    #[serde(rename = "RangeAttr")]
    range: f64,
    v: i64,
}

/// Regression (finding 3, keys): a typed read-modify-write whose key is spelled `1.50` was refused
/// as "changing its key", because the item read back carries `1.5`.
#[tokio::test]
async fn typed_update_accepts_any_spelling_of_its_key() {
    canonical_numbers_always();
    let env = TestEnv::new("num-typed").await;
    env.raw_put(
        &env.range_table,
        item(&[("Id", s("a")), ("RangeAttr", n("1.5")), ("v", n(1))]),
    )
    .await;
    let key = rkey("a", "1.50");
    env.manager
        .run(async |tx| {
            tx.update::<Row, _>(&env.range_table, key.clone(), |r| r.v += 1)
                .await?;
            Ok(())
        })
        .await
        .unwrap();
    let raw = env.raw_get(&env.range_table, &key).await.unwrap();
    assert_eq!(
        raw,
        to_item(&Row {
            id: "a".into(),
            range: 1.5,
            v: 2
        })
        .unwrap()
    );
    // Changing the key is still refused.
    let e = env
        .manager
        .run(async |tx| {
            tx.update::<Row, _>(&env.range_table, key.clone(), |r| r.range = 2.5)
                .await?;
            Ok(())
        })
        .await
        .unwrap_err();
    assert!(e.to_string().contains("must not change its key"), "{e}");
}
