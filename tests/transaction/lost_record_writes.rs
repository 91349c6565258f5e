//! Lost responses to the record's creation and appends.

use aws_sdk_dynamodb::types::ReturnValue;
use dynamodb_transactions::fault::FaultMode;
use dynamodb_transactions::{Error, TxState};

use crate::common::*;
use crate::counts;

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
        // A small first request: the record is created with it in its header.
        tx.get_item()
            .table_name(&env.table)
            .key("Id", s(&format!("first-{mode:?}")))
            .send()
            .await
            .unwrap();
        for id in &big {
            tx.put_item()
                .table_name(&env.table)
                .item("Id", s(id))
                .item("blob", s(&blob))
                .send()
                .await
                .unwrap();
        }
        // Recording 3 × 120 KB more: too much for the header, a TransactWriteItems adds chunk
        // rows.
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

/// The answer to the record's creation is lost; meanwhile a second handle resumes the transaction
/// from the record that did land, commits it, and the finalized record is deleted. The first
/// handle's retried call must not create the record anew (the transaction would run twice): it
/// finds no record, ends the transaction under a tombstone and reports `UnknownOutcome`, and the
/// write stays applied once. Found by the protocol model.
#[tokio::test]
async fn a_call_retried_after_its_record_was_committed_elsewhere_and_deleted_is_not_run_again() {
    let env = TestEnv::new("lost-create-del").await;
    env.raw_put(&env.table, item(&[("Id", s("x")), ("n", n(0))]))
        .await;
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
    // Another handle finishes the transaction the record describes; the record is deleted.
    let (m2, _) = env.second_coordinator();
    m2.resume(&tx_id).await.unwrap().commit().await.unwrap();
    assert_eq!(counts(&env, &["x"]).await, vec![n(1)]);
    assert!(m2.delete_transaction(&tx_id).await.unwrap());

    let again = call().await;
    assert!(
        matches!(again, Err(Error::UnknownOutcome { .. })),
        "{again:?}"
    );
    assert!(tx.commit().await.is_err());
    assert_eq!(counts(&env, &["x"]).await, vec![n(1)]);
    assert_eq!(env.tx_state(&tx_id).await, None);
}
