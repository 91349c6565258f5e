//! Writes to items the transaction already holds are recorded by the one-request commit itself:
//! its decisive write appends their requests (with a nonce), so a read-then-write transaction
//! commits without a separate append. What each outcome looks like.
use super::*;
use dynamodb_transactions::fault::FaultMode;
use dynamodb_transactions::{Error, TxOutcome, TxState};

async fn seed(env: &TestEnv) {
    for (id, v) in [("a", 1), ("b", 1)] {
        env.raw_put(&env.table, item(&[("Id", s(id)), ("v", n(v))]))
            .await;
    }
    // Warm the key-schema cache.
    env.manager
        .get_item()
        .table_name(&env.table)
        .key("Id", s("warm"))
        .send()
        .await
        .unwrap();
}

/// Reads `a` and `b` under lock and buffers `SET v = 0` on `a` and `SET v = 2` on `b`.
async fn transfer(tx: &dynamodb_transactions::Transaction, table: &str) {
    for id in ["a", "b"] {
        tx.get_item()
            .table_name(table)
            .key("Id", s(id))
            .send()
            .await
            .unwrap();
    }
    for (id, v) in [("a", 0), ("b", 2)] {
        tx.update_item()
            .table_name(table)
            .key("Id", s(id))
            .update_expression("SET v = :v")
            .expression_attribute_values(":v", n(v))
            .send()
            .await
            .unwrap();
    }
}

/// The requests of a transaction's record, by op code.
async fn recorded_ops(env: &TestEnv, id: &dynamodb_transactions::TxId) -> Vec<String> {
    let header = env
        .scan_all(env.manager.transactions_table())
        .await
        .into_iter()
        .find(|r| r["_TxId"] == s(id.as_str()) && r["_TxN"] == n(0))
        .expect("record");
    header["_TxR"]
        .as_l()
        .unwrap()
        .iter()
        .map(|r| r.as_m().unwrap()["o"].as_s().unwrap().clone())
        .collect()
}

#[tokio::test]
async fn writes_on_held_items_are_recorded_by_the_commit() {
    let env = TestEnv::new("fold").await;
    seed(&env).await;
    env.counter.reset();
    let tx = env.manager.begin();
    let id = tx.id().clone();
    transfer(&tx, &env.table).await;
    tx.commit().await.unwrap();
    let c = env.counter.snapshot();
    // Create + lock, append + lock, then the commit alone (was a fourth append before it).
    assert_eq!(env.counter.total(), 5, "{c:?}");
    assert_eq!(c.get("TransactWriteItems"), Some(&1), "{c:?}");
    assert_eq!(recorded_ops(&env, &id).await, ["G", "G", "U", "U"]);
    assert_eq!(env.tx_state(&id).await, Some((TxState::Committed, true)));
    assert_eq!(env.raw_get(&env.table, &key("a")).await.unwrap()["v"], n(0));
    assert_eq!(env.raw_get(&env.table, &key("b")).await.unwrap()["v"], n(2));
    assert_clean(&env).await;
}

/// The folded commit lands but its answer is lost (and the SDK's retry, if any, meets the landed
/// commit): the record carries the commit's nonce, so the handle knows its writes are in it.
#[tokio::test]
async fn a_lost_answer_to_the_folded_commit_is_recognised_by_its_nonce() {
    let env = TestEnv::new("fold-lost").await;
    seed(&env).await;
    let tx = env.manager.begin();
    let id = tx.id().clone();
    transfer(&tx, &env.table).await;
    env.faults
        .fail_operation_at("TransactWriteItems", 1, FaultMode::AfterSend);
    tx.commit().await.unwrap();
    assert!(env.faults.struck(), "the commit's answer was lost");
    env.faults.disarm();
    assert_eq!(recorded_ops(&env, &id).await, ["G", "G", "U", "U"]);
    assert_eq!(env.tx_state(&id).await, Some((TxState::Committed, true)));
    assert_eq!(env.raw_get(&env.table, &key("a")).await.unwrap()["v"], n(0));
    assert_eq!(env.raw_get(&env.table, &key("b")).await.unwrap()["v"], n(2));
    assert_clean(&env).await;
}

/// Another handle commits the transaction (its two reads) before this handle's folded commit:
/// the committed record does not carry this handle's nonce, so its writes were never recorded nor
/// applied, and it says so instead of reporting them committed.
#[tokio::test]
async fn a_commit_by_another_handle_leaves_the_folded_writes_out_and_says_so() {
    let env = TestEnv::new("fold-other").await;
    seed(&env).await;
    let tx = env.manager.begin();
    let id = tx.id().clone();
    transfer(&tx, &env.table).await;
    let (m2, _) = env.second_coordinator();
    m2.resume(&id).await.unwrap().commit().await.unwrap();
    let e = tx.commit().await.unwrap_err();
    assert!(
        matches!(e, Error::CommittedWithout { unrecorded: 2, .. }),
        "{e:?}"
    );
    assert_eq!(e.transaction_outcome(), Some(TxOutcome::CommittedWithout));
    assert_eq!(recorded_ops(&env, &id).await, ["G", "G"]);
    assert_eq!(env.raw_get(&env.table, &key("a")).await.unwrap()["v"], n(1));
    assert_eq!(env.raw_get(&env.table, &key("b")).await.unwrap()["v"], n(1));
    assert_clean(&env).await;
}
