//! Commit outcomes after a commit request may have landed (5xx answers, throttled actions).

use dynamodb_transactions::TransactionManager;
use dynamodb_transactions::TxState;
use dynamodb_transactions::fault::{RequestCounter, ServiceAnswer, ServiceFaults};

use crate::common::*;
use crate::counts;

/// A second manager over `env`'s tables whose client answers through a [`ServiceFaults`];
/// `one_shot: false` commits in phases.
fn service_faulty(
    env: &TestEnv,
    one_shot: bool,
    batch_locks: bool,
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
        s.batch_locks = batch_locks;
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

/// The decisive commit request lands but DynamoDB answers 500 (with an error body, or none), to
/// the first attempt and to the SDK's retries of it (`count`). `commit` must learn the outcome
/// from the record: Ok, applied exactly once, never a retryable error for a committed transaction.
#[tokio::test]
async fn a_landed_commit_answered_with_a_5xx_is_reported_committed() {
    let env = TestEnv::new("c5xx").await;
    // (one-request commit?, batched locks?, operation of the decisive request, its number among
    // the operation's requests, requests of that operation besides it: item by item, two locks
    // are UpdateItems before the flip, and the finalize one after; batched, the record and the
    // locks are the first TransactWriteItems)
    for (one_shot, batch, op, at, others) in [
        (true, false, "TransactWriteItems", 1, 0),
        (true, true, "TransactWriteItems", 2, 1),
        (false, false, "UpdateItem", 3, 3),
    ] {
        for (answer, count) in [
            (ServiceAnswer::InternalServerError, 3),
            (ServiceAnswer::EmptyServerError, 3),
            (ServiceAnswer::InternalServerError, 1),
        ] {
            let what = format!("one_shot={one_shot} batch={batch} {answer:?} x{count}");
            let ids = [
                format!("a-{one_shot}-{batch}-{count}"),
                format!("b-{one_shot}-{batch}-{count}"),
            ];
            let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
            for id in &ids {
                env.raw_put(&env.table, item(&[("Id", s(id)), ("n", n(0))]))
                    .await;
            }
            let (m, faults, _) = service_faulty(&env, one_shot, batch);
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
    let (m, faults, _) = service_faulty(&env, true, false);
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
                let (m, faults, _) = service_faulty(&env, one_shot, false);
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
        let (m, faults, _) = service_faulty(&env, one_shot, false);
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
