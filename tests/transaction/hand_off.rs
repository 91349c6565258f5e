//! Handing a transaction to another coordinator: `hand_off` records every request of the handle,
//! buffered writes and held reads included, so that a resume by id commits exactly what the first
//! coordinator did — also when an answer is lost or the first coordinator crashes at any of the
//! hand-off's requests. `abandon`, by contrast, records nothing.

use dynamodb_transactions::fault::FaultMode;
use dynamodb_transactions::{Item, Transaction, TxState};

use super::*;

async fn seed_bob(env: &TestEnv) {
    env.raw_put(&env.table, item(&[("Id", s("bob")), ("bal", n(10))]))
        .await;
}

/// Reads bob, adds 5 to his balance, and opens an account for carol: one read driven at once, two
/// buffered writes.
async fn work(env: &TestEnv, tx: &Transaction) {
    tx.get_item()
        .table_name(&env.table)
        .key("Id", s("bob"))
        .send()
        .await
        .unwrap();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("bob"))
        .update_expression("SET bal = bal + :d")
        .expression_attribute_values(":d", n(5))
        .send()
        .await
        .unwrap();
    tx.put_item()
        .table_name(&env.table)
        .item("Id", s("carol"))
        .item("bal", n(1))
        .send()
        .await
        .unwrap();
}

async fn balances(env: &TestEnv) -> (Option<Item>, Option<Item>) {
    (
        env.raw_get(&env.table, &key("bob")).await,
        env.raw_get(&env.table, &key("carol")).await,
    )
}

#[tokio::test]
async fn a_resumed_hand_off_commits_the_first_coordinators_writes() {
    let env = TestEnv::new("handoff").await;
    seed_bob(&env).await;
    let tx = env.manager.begin();
    work(&env, &tx).await;
    let id = tx.hand_off().await.unwrap();
    assert_eq!(id, *tx.id());
    // The handle is done: nothing more goes through it, and dropping it rolls nothing back.
    assert!(matches!(
        tx.commit().await,
        Err(dynamodb_transactions::Error::TransactionFinished { .. })
    ));
    let (m2, _) = env.second_coordinator();
    m2.resume(&id).await.unwrap().commit().await.unwrap();
    assert_eq!(
        balances(&env).await,
        (
            Some(item(&[("Id", s("bob")), ("bal", n(15))])),
            Some(item(&[("Id", s("carol")), ("bal", n(1))]))
        )
    );
    assert_eq!(env.tx_state(&id).await, Some((TxState::Committed, true)));
}

#[tokio::test]
async fn an_abandoned_handles_buffered_writes_are_not_in_its_record() {
    let env = TestEnv::new("handoff-ab").await;
    seed_bob(&env).await;
    let tx = env.manager.begin();
    work(&env, &tx).await;
    let id = tx.id().clone();
    tx.abandon();
    let (m2, _) = env.second_coordinator();
    m2.resume(&id).await.unwrap().commit().await.unwrap();
    // Only the read was recorded: the commit commits a read.
    assert_eq!(
        balances(&env).await,
        (Some(item(&[("Id", s("bob")), ("bal", n(10))])), None)
    );
}

/// A crash (before or after the request reached DynamoDB) or a lost answer at each request of the
/// hand-off: a failed hand-off leaves the transaction for a resumed coordinator to roll back, or
/// the first handle hands it off again; either way the writes take effect exactly once or not at
/// all.
#[tokio::test]
async fn a_hand_off_survives_a_crash_or_a_lost_answer_at_every_request() {
    for mode in [FaultMode::BeforeSend, FaultMode::AfterSend] {
        for lost_only in [false, true] {
            for n_at in 1.. {
                let env = TestEnv::new("handoff-f").await;
                seed_bob(&env).await;
                let tx = env.manager.begin();
                work(&env, &tx).await;
                env.counter.reset();
                if lost_only {
                    env.faults.fail_once_at(n_at, mode);
                } else {
                    env.faults.crash_at(n_at, mode);
                }
                let first = tx.hand_off().await;
                let struck = env.faults.struck();
                env.faults.disarm();
                let id = tx.id().clone();
                let handed = match first {
                    Ok(id) => Some(id),
                    // The coordinator lived (only an answer was lost): it hands off again.
                    Err(_) if lost_only => Some(tx.hand_off().await.unwrap()),
                    // It died: whoever resumes the transaction rolls it back.
                    Err(_) => None,
                };
                let (m2, _) = env.second_coordinator();
                let want_committed = handed.is_some();
                let resumed = m2.resume(&id).await;
                match (handed, resumed) {
                    (Some(_), Ok(t)) => t.commit().await.unwrap(),
                    (None, Ok(t)) => t.rollback().await.unwrap(),
                    (h, Err(e)) => panic!("{mode:?} lost={lost_only} at {n_at}: resume {h:?}: {e}"),
                }
                let bob_bal = if want_committed { 15 } else { 10 };
                let (bob, carol) = balances(&env).await;
                assert_eq!(
                    bob,
                    Some(item(&[("Id", s("bob")), ("bal", n(bob_bal))])),
                    "{mode:?} lost={lost_only} at {n_at}"
                );
                assert_eq!(
                    carol.is_some(),
                    want_committed,
                    "{mode:?} lost={lost_only} at {n_at}"
                );
                assert_clean(&env).await;
                if !struck {
                    break; // past the hand-off's last request
                }
            }
        }
    }
}
