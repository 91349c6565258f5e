//! Any size commits: a transaction's own concurrent batches never conflict with each other on
//! DynamoDB (they check gates, not the header), and it commits on its first attempt.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use dynamodb_transactions::TxState;
use dynamodb_transactions::fault::{DynamoDbProfile, ProfileSettings};

use crate::common::*;

/// `n` updates in one `run` under DynamoDB's conflict rule and latency: the attempts it took, and
/// what the profile refused.
async fn commit_updates(n_items: usize) {
    let mut settings = ProfileSettings::all(11);
    // Every read is consistent here; the versions need not be kept.
    settings.stale_reads = false;
    let profile = DynamoDbProfile::new(settings);
    let env = TestEnv::through_profile(&format!("any{n_items}"), &profile, |_| {}).await;
    let items = (0..n_items)
        .map(|i| item(&[("Id", s(&format!("k{i}"))), ("hits", n(0))]))
        .collect();
    env.raw_put_all(&env.table, items).await;
    let before = profile.stats();
    env.counter.reset();
    let attempts = Arc::new(AtomicU32::new(0));
    let table = env.table.clone();
    let a = attempts.clone();
    let id = env
        .manager
        .run(async move |tx| {
            a.fetch_add(1, Ordering::SeqCst);
            for i in 0..n_items {
                tx.update_item()
                    .table_name(&table)
                    .key("Id", s(&format!("k{i}")))
                    .update_expression("SET hits = hits + :one")
                    .expression_attribute_values(":one", n(1))
                    .send()
                    .await?;
            }
            Ok(tx.id().clone())
        })
        .await
        .expect("the transaction commits");
    let after = profile.stats();
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        1,
        "committed on its first attempt"
    );
    assert_eq!(
        after.since(&before).transactions_in_conflict,
        0,
        "no batch of the transaction conflicted (with itself: nothing else runs)"
    );
    for it in env.scan_all(&env.table).await {
        assert!(!has_tx_attrs(&it), "left locked: {it:?}");
        assert_eq!(it["hits"], n(1), "{:?} updated exactly once", it["Id"]);
    }
    assert_eq!(env.tx_state(&id).await, Some((TxState::Committed, true)));
    // Its record, with the gates its commit closed, goes when it is deleted.
    assert!(env.manager.delete_transaction(&id).await.unwrap());
    assert!(
        env.scan_all(env.manager.transactions_table())
            .await
            .is_empty()
    );
    eprintln!(
        "{n_items} updates: {} requests {:?}",
        env.counter.total(),
        env.counter.snapshot()
    );
}

#[tokio::test]
async fn three_hundred_updates_commit_on_their_first_attempt() {
    commit_updates(300).await;
}

#[tokio::test]
async fn a_thousand_updates_commit_on_their_first_attempt() {
    commit_updates(1000).await;
}

#[tokio::test]
async fn five_thousand_updates_commit_on_their_first_attempt() {
    commit_updates(5000).await;
}
