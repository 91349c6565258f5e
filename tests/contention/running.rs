//! `Settings::wait_for_running_holders`: an older transaction waits for a younger holder whose
//! record shows no wait, past `wound_grace`, instead of rolling it back.

use std::time::Duration;

use dynamodb_transactions::{Error, Item, TicketSource, TxState};

use crate::common::*;
use crate::{lock, ordered_with, set_v, ticket_of};

/// A younger transaction holds `x` (read, then updated) and commits 400 ms after an older one
/// asked for `x`: eight times the grace. Returns the younger's commit and what the older read.
async fn younger_commits_late(
    wait_for_running: bool,
) -> (TestEnv, Result<(), Error>, Option<Item>, TxState) {
    let env = TestEnv::new("ct-running").await;
    for k in ["o", "x"] {
        env.raw_put(&env.table, item(&[("Id", s(k)), ("v", n(1))]))
            .await;
    }
    let m = ordered_with(&env, TicketSource::Counter, Duration::from_secs(30), |s| {
        s.wait_for_running_holders = wait_for_running;
        s.wound_grace = Duration::from_millis(50);
        s.lock_wait = Duration::from_secs(5);
    });
    // Tickets are taken as the transactions begin: `older` first.
    let older = m.begin();
    lock(&older, &env.table, "o").await.unwrap();
    let younger = m.begin();
    lock(&younger, &env.table, "x").await.unwrap();
    set_v(&younger, &env.table, "x", 2).await.unwrap();
    assert!(ticket_of(&env, older.id()).await < ticket_of(&env, younger.id()).await);
    let younger_id = younger.id().clone();
    let reading = async {
        older
            .get_item()
            .table_name(&env.table)
            .key("Id", s("x"))
            .send()
            .await
    };
    let committing = async {
        tokio::time::sleep(Duration::from_millis(400)).await;
        younger.commit().await
    };
    let (read, committed) = tokio::join!(reading, committing);
    let read = read.expect("the older transaction's read");
    older.commit().await.expect("the older transaction commits");
    let state = env.tx_state(&younger_id).await.unwrap().0;
    (env, committed, read.item().cloned(), state)
}

#[tokio::test]
async fn an_older_transaction_waits_for_a_running_younger_holder_past_the_grace() {
    let (env, committed, read, state) = younger_commits_late(true).await;
    committed.expect("the younger holder was not rolled back");
    assert_eq!(state, TxState::Committed);
    assert_eq!(
        read.unwrap()["v"],
        n(2),
        "the older read the younger's write"
    );
    let raw = env.raw_get(&env.table, &key("x")).await.unwrap();
    assert_eq!(raw, item(&[("Id", s("x")), ("v", n(2))]));
}

#[tokio::test]
async fn without_the_setting_a_running_younger_holder_is_rolled_back_after_the_grace() {
    let (env, committed, read, state) = younger_commits_late(false).await;
    let err = committed.unwrap_err();
    assert!(matches!(err, Error::RolledBack { .. }), "{err:?}");
    assert_eq!(state, TxState::RolledBack);
    assert_eq!(
        read.unwrap()["v"],
        n(1),
        "the older read the item as it was"
    );
    let raw = env.raw_get(&env.table, &key("x")).await.unwrap();
    assert_eq!(raw, item(&[("Id", s("x")), ("v", n(1))]));
}
