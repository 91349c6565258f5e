//! The write-only fast path: one `TransactWriteItems`, no locks, interoperating with the locking
//! protocol on the same items.
mod common;

use common::*;
use dynamodb_transactions::fault::FaultMode;
use dynamodb_transactions::{ContentionPolicy, Error, TxState};

async fn env(prefix: &str) -> TestEnv {
    TestEnv::with_settings(prefix, |s| s.write_only_fast_path = true).await
}

async fn warm(env: &TestEnv) {
    env.manager
        .get_item()
        .table_name(&env.table)
        .key("Id", s("warm"))
        .send()
        .await
        .unwrap();
    env.counter.reset();
}

#[tokio::test]
async fn write_only_transactions_commit_in_one_request() {
    let env = env("fp-one").await;
    for i in 0..5 {
        env.raw_put(
            &env.table,
            item(&[("Id", s(&format!("u{i}"))), ("n", n(i))]),
        )
        .await;
    }
    env.raw_put(&env.table, item(&[("Id", s("gone")), ("n", n(0))]))
        .await;
    warm(&env).await;
    let tx = env.manager.begin();
    let id = tx.id().clone();
    for i in 0..5 {
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s(&format!("u{i}")))
            .update_expression("SET n = n + :one")
            .condition_expression("n >= :zero")
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":zero", n(0))
            .send()
            .await
            .unwrap();
    }
    tx.put_item()
        .table_name(&env.table)
        .item("Id", s("new"))
        .item("n", n(7))
        .condition_expression("attribute_not_exists(Id)")
        .send()
        .await
        .unwrap();
    tx.delete_item()
        .table_name(&env.table)
        .key("Id", s("gone"))
        .send()
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(env.counter.snapshot().get("TransactWriteItems"), Some(&1));
    assert_eq!(env.counter.total(), 1, "{:?}", env.counter.snapshot());
    for i in 0..5 {
        let it = env
            .raw_get(&env.table, &key(&format!("u{i}")))
            .await
            .unwrap();
        assert_eq!(it, item(&[("Id", s(&format!("u{i}"))), ("n", n(i + 1))]));
    }
    assert_eq!(
        env.raw_get(&env.table, &key("new")).await.unwrap(),
        item(&[("Id", s("new")), ("n", n(7))])
    );
    assert!(env.raw_get(&env.table, &key("gone")).await.is_none());
    assert_eq!(env.tx_state(&id).await, Some((TxState::Committed, true)));
}

#[tokio::test]
async fn a_false_condition_applies_nothing() {
    let env = env("fp-cond").await;
    env.raw_put(&env.table, item(&[("Id", s("a")), ("n", n(1))]))
        .await;
    env.raw_put(&env.table, item(&[("Id", s("b")), ("n", n(1))]))
        .await;
    let tx = env.manager.begin();
    let id = tx.id().clone();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .update_expression("SET n = :v")
        .expression_attribute_values(":v", n(50))
        .send()
        .await
        .unwrap();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("b"))
        .update_expression("SET n = :v")
        .condition_expression("n > :v")
        .expression_attribute_values(":v", n(50))
        .send()
        .await
        .unwrap();
    match tx.commit().await {
        Err(Error::ConditionFailed {
            request_index: 1,
            item: Some(current),
            ..
        }) => {
            assert_eq!(current, item(&[("Id", s("b")), ("n", n(1))]));
        }
        other => panic!("expected ConditionFailed, got {other:?}"),
    }
    assert_eq!(env.raw_get(&env.table, &key("a")).await.unwrap()["n"], n(1));
    assert_eq!(env.tx_state(&id).await, None, "no record was written");
}

#[tokio::test]
async fn a_locked_item_falls_back_to_the_locking_protocol() {
    let env = TestEnv::with_settings("fp-lock", |s| {
        s.write_only_fast_path = true;
        s.contention = ContentionPolicy::RollBackOthers;
    })
    .await;
    env.raw_put(&env.table, item(&[("Id", s("a")), ("n", n(1))]))
        .await;
    // Another transaction holds a read lock on the item.
    let holder = env.manager.begin();
    holder
        .get_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .send()
        .await
        .unwrap();
    let tx = env.manager.begin();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .update_expression("SET n = :v")
        .expression_attribute_values(":v", n(2))
        .send()
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        env.raw_get(&env.table, &key("a")).await.unwrap(),
        item(&[("Id", s("a")), ("n", n(2))])
    );
    assert_eq!(
        env.tx_state(holder.id()).await,
        Some((TxState::RolledBack, true))
    );
    assert!(holder.commit().await.unwrap_err().is_rolled_back());
}

#[tokio::test]
async fn a_lost_response_is_repeated_without_applying_twice() {
    let env = env("fp-lost").await;
    env.raw_put(&env.table, item(&[("Id", s("c")), ("n", n(0))]))
        .await;
    warm(&env).await;
    let tx = env.manager.begin();
    let id = tx.id().clone();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("c"))
        .update_expression("ADD n :one")
        .expression_attribute_values(":one", n(1))
        .send()
        .await
        .unwrap();
    env.faults.fail_once_at(1, FaultMode::AfterSend);
    tx.commit().await.unwrap();
    assert!(env.faults.struck());
    assert_eq!(
        env.raw_get(&env.table, &key("c")).await.unwrap()["n"],
        n(1),
        "applied once"
    );
    assert_eq!(env.tx_state(&id).await, Some((TxState::Committed, true)));
}

#[tokio::test]
async fn a_coordinator_that_dies_after_sending_reports_an_undetermined_outcome() {
    let env = env("fp-dead").await;
    env.raw_put(&env.table, item(&[("Id", s("c")), ("n", n(0))]))
        .await;
    warm(&env).await;
    let tx = env.manager.begin();
    let id = tx.id().clone();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("c"))
        .update_expression("ADD n :one")
        .expression_attribute_values(":one", n(1))
        .send()
        .await
        .unwrap();
    env.faults.crash_at(1, FaultMode::AfterSend);
    let err = tx.commit().await.unwrap_err();
    assert!(err.is_undetermined(), "{err:?}");
    assert_eq!(
        err.transaction_outcome(),
        Some(dynamodb_transactions::TxOutcome::Undetermined)
    );
    env.faults.disarm();
    // The record tells what happened: it landed.
    assert_eq!(env.tx_state(&id).await, Some((TxState::Committed, true)));
    assert_eq!(
        env.raw_get(&env.table, &key("c")).await.unwrap(),
        item(&[("Id", s("c")), ("n", n(1))])
    );
}

/// The fast path's request lands, but DynamoDB answers 500 to it and to the SDK's retries: commit
/// learns from the record that it committed (Ok, applied once), never a retryable error or
/// `AlreadyCommitted`.
#[tokio::test]
async fn a_landed_commit_answered_with_a_5xx_is_reported_committed() {
    use dynamodb_transactions::fault::{ServiceAnswer, ServiceFaults};
    let env = env("fp-5xx").await;
    for (answer, count) in [
        (ServiceAnswer::InternalServerError, 3),
        (ServiceAnswer::EmptyServerError, 3),
        (ServiceAnswer::InternalServerError, 1),
    ] {
        let what = format!("{answer:?} x{count}");
        let id = format!("c-{answer:?}-{count}");
        env.raw_put(&env.table, item(&[("Id", s(&id)), ("n", n(0))]))
            .await;
        let faults = ServiceFaults::new();
        let m = dynamodb_transactions::TransactionManager::builder(client_with(vec![shared(
            faults.clone(),
        )]))
        .transactions_table(env.manager.transactions_table())
        .images_table(env.manager.images_table())
        .configure(|s| s.rollback_on_drop = false)
        .build();
        let tx = m.begin();
        let tx_id = tx.id().clone();
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s(&id))
            .update_expression("ADD n :one")
            .expression_attribute_values(":one", n(1))
            .send()
            .await
            .unwrap();
        faults.answer_after_send("TransactWriteItems", 1, count, answer.clone());
        let r = tx.commit().await;
        assert_eq!(faults.injected(), count, "{what}");
        assert!(r.is_ok(), "{what}: {r:?}");
        assert_eq!(
            env.raw_get(&env.table, &key(&id)).await.unwrap(),
            item(&[("Id", s(&id)), ("n", n(1))]),
            "{what}: applied once"
        );
        assert_eq!(
            env.tx_state(&tx_id).await,
            Some((TxState::Committed, true)),
            "{what}"
        );
    }
}

/// Marked for the change feed (`Settings::fast_path_stamps`): each put and update carries the
/// transaction's id in `_TxM` and the record names the items, still in one request (also when an
/// answer is lost); no library read shows the mark; a transaction with a delete takes the locking
/// path.
#[tokio::test]
async fn marked_writes_commit_in_one_request_and_no_read_shows_the_mark() {
    use aws_sdk_dynamodb::types::KeysAndAttributes;
    use dynamodb_transactions::{FastPathStamps, IsolationLevel};
    let env = TestEnv::with_settings("fp-mark", |s| {
        s.write_only_fast_path = true;
        s.fast_path_stamps = FastPathStamps::Always;
    })
    .await;
    env.raw_put(&env.table, item(&[("Id", s("u")), ("n", n(1))]))
        .await;
    env.raw_put(&env.table, item(&[("Id", s("gone")), ("n", n(0))]))
        .await;
    warm(&env).await;
    let tx = env.manager.begin();
    let id = tx.id().clone();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("u"))
        .update_expression("SET n = n + :one")
        .condition_expression("n >= :one")
        .expression_attribute_values(":one", n(1))
        .send()
        .await
        .unwrap();
    tx.put_item()
        .table_name(&env.table)
        .item("Id", s("new"))
        .item("n", n(7))
        .send()
        .await
        .unwrap();
    env.faults.fail_once_at(1, FaultMode::AfterSend);
    tx.commit().await.unwrap();
    assert!(env.faults.struck());
    assert_eq!(env.counter.snapshot().get("TransactWriteItems"), Some(&2));
    assert_eq!(env.counter.total(), 2, "{:?}", env.counter.snapshot());
    let mark = s(id.as_str());
    assert_eq!(
        env.raw_get(&env.table, &key("u")).await.unwrap(),
        item(&[("Id", s("u")), ("n", n(2)), ("_TxM", mark.clone())]),
        "applied once, marked"
    );
    assert_eq!(
        env.raw_get(&env.table, &key("new")).await.unwrap(),
        item(&[("Id", s("new")), ("n", n(7)), ("_TxM", mark.clone())])
    );
    // The record names the items: op, table and key, no values.
    let record = env
        .client
        .get_item()
        .table_name(env.manager.transactions_table())
        .key("_TxId", mark.clone())
        .key("_TxN", n(0))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    let written = record["_TxL"].as_l().unwrap();
    assert_eq!(written.len(), 2, "{record:?}");
    for w in written {
        let m = w.as_m().unwrap();
        let mut fields: Vec<_> = m.keys().map(String::as_str).collect();
        fields.sort();
        assert_eq!(fields, ["k", "o", "t"], "{m:?}");
    }
    assert_eq!(record["_TxR"].as_l().unwrap().len(), 0);
    assert_eq!(env.tx_state(&id).await, Some((TxState::Committed, true)));

    // No library read shows the mark.
    let user = |id: &str, v: i64| item(&[("Id", s(id)), ("n", n(v))]);
    #[derive(serde::Deserialize, Debug, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Row {
        #[serde(rename = "Id")]
        id: String,
        n: i64,
    }
    for level in [IsolationLevel::Uncommitted, IsolationLevel::Committed] {
        let got = env
            .manager
            .get_item()
            .table_name(&env.table)
            .key("Id", s("u"))
            .isolation(level)
            .consistent_read(true)
            .send()
            .await
            .unwrap()
            .item;
        assert_eq!(got, Some(user("u", 2)), "{level:?}");
        // (Eventually consistent: through the DynamoDB profile it may be the version before.)
        let typed: Option<Row> = env.manager.get(&env.table, key("u"), level).await.unwrap();
        assert_eq!(typed.map(|r| r.id).as_deref(), Some("u"));
        let scanned = env
            .manager
            .scan()
            .table_name(&env.table)
            .isolation(level)
            .consistent_read(true)
            .send_all()
            .await
            .unwrap();
        assert_eq!(scanned.len(), 3, "{scanned:?}");
        assert!(
            scanned
                .iter()
                .all(|i| i.keys().all(|k| !k.starts_with("_Tx"))),
            "{scanned:?}"
        );
        let batch = env
            .manager
            .batch_get_item()
            .request_items(
                &env.table,
                KeysAndAttributes::builder()
                    .keys(key("u"))
                    .keys(key("new"))
                    .consistent_read(true)
                    .build()
                    .unwrap(),
            )
            .isolation(level)
            .send()
            .await
            .unwrap();
        let mut got = batch.responses()[&env.table].to_vec();
        got.sort_by_key(|i| i["Id"].as_s().unwrap().clone());
        assert_eq!(got, [user("new", 7), user("u", 2)], "{level:?}");
    }
    // Inside a transaction too, and in a failed condition's item.
    let tx = env.manager.begin();
    let got = tx
        .get_item()
        .table_name(&env.table)
        .key("Id", s("new"))
        .send()
        .await
        .unwrap()
        .item;
    assert_eq!(got, Some(user("new", 7)));
    tx.rollback().await.unwrap();
    let tx = env.manager.begin();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("u"))
        .update_expression("SET n = :v")
        .condition_expression("n > :v")
        .expression_attribute_values(":v", n(50))
        .send()
        .await
        .unwrap();
    match tx.commit().await {
        Err(Error::ConditionFailed {
            item: Some(current),
            ..
        }) => assert_eq!(current, user("u", 2)),
        other => panic!("expected ConditionFailed, got {other:?}"),
    }

    // A delete leaves nothing to mark: the locking path.
    let tx = env.manager.begin();
    tx.delete_item()
        .table_name(&env.table)
        .key("Id", s("gone"))
        .send()
        .await
        .unwrap();
    tx.put_item()
        .table_name(&env.table)
        .item("Id", s("other"))
        .item("n", n(3))
        .send()
        .await
        .unwrap();
    env.counter.reset();
    tx.commit().await.unwrap();
    assert!(env.counter.total() >= 2, "{:?}", env.counter.snapshot());
    assert!(env.raw_get(&env.table, &key("gone")).await.is_none());
    assert_eq!(
        env.raw_get(&env.table, &key("other")).await.unwrap(),
        user("other", 3)
    );
}
