//! Chaos, replayed: coordinators crash at random requests, answers are lost, transactions contend
//! and some roll back, through every commit path (the write-only fast path, one request, phased
//! with the writes applied before the decision, phased rolled forward, transactions of 1,000 and
//! 150 items); the sweeper finishes
//! what the crashed ones left. Then the feed, read from the start, must rebuild both tables exactly
//! as they end, yield exactly the transactions whose record says committed, each once and whole,
//! and never a `_Tx` attribute.
//!
//! `FEED_CHAOS_SEED=<n>` replays a run.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::time::Duration;

use dynamodb_transactions::fault::{FaultInjector, FaultMode};
use dynamodb_transactions::{TransactionManager, TxId};
use rand::{Rng, SeedableRng};

use crate::common::{TestEnv, client_with, shared, sweep_left_work};
use crate::*;

/// A coordinator of its own, with a fault injector, and the commit path of worker `w`.
fn coordinator(env: &TestEnv, w: u64) -> (TransactionManager, FaultInjector) {
    let faults = FaultInjector::new();
    let m = TransactionManager::builder(client_with(vec![shared(faults.clone())]))
        .transactions_table(env.manager.transactions_table())
        .images_table(env.manager.images_table())
        .configure(|s| {
            s.rollback_on_drop = false;
            // Write-only transactions (without a delete) commit on the fast path, marked for the
            // feed, on worker 3; the others lock.
            s.write_only_fast_path = w % 4 == 3;
            match w % 4 {
                // Phased, every write applied before the decision (restored on rollback).
                1 => {
                    s.one_shot_max_items = 0;
                    s.roll_forward = false;
                }
                // Phased, writes rolled forward after the decision.
                2 => s.one_shot_max_items = 0,
                // One request (or phased above 98 items); worker 3: the fast path when it fits.
                _ => {}
            }
        })
        .build();
    (m, faults)
}

/// A transaction of `count` puts on the plain table, committed unless the coordinator crashes.
async fn large_transaction(
    m: &TransactionManager,
    table: &str,
    count: usize,
    serial: &AtomicI64,
) -> TxId {
    let tx = m.begin();
    let id = tx.id().clone();
    for i in 0..count {
        let v = serial.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if tx
            .put_item()
            .table_name(table)
            .item("Id", s(&format!("big{i}")))
            .item("v", n(v))
            .send()
            .await
            .is_err()
        {
            return id;
        }
    }
    let _ = tx.commit().await;
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaying_the_feed_from_the_start_rebuilds_every_table_after_chaos() {
    let seed: u64 = std::env::var("FEED_CHAOS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20261127);
    println!("feed chaos seed {seed} (replay with FEED_CHAOS_SEED={seed})");
    let env = TestEnv::new("feed-chaos").await;
    enable_stream(&env.client, &env.table).await;
    enable_stream(&env.client, &env.range_table).await;
    let serial = Arc::new(AtomicI64::new(1));
    let mut handles = Vec::new();
    for w in 0..4u64 {
        let (m, faults) = coordinator(&env, w);
        let tables = (env.table.clone(), env.range_table.clone());
        let serial = serial.clone();
        handles.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed.wrapping_mul(31).wrapping_add(w));
            let mut ids = Vec::new();
            let mut struck = 0;
            for i in 0..14 {
                match rng.random_range(0..10) {
                    0 => faults.crash_at(rng.random_range(1..=6), FaultMode::BeforeSend),
                    1 => faults.crash_at(rng.random_range(1..=6), FaultMode::AfterSend),
                    2 | 3 => faults.fail_once_at(rng.random_range(1..=6), FaultMode::AfterSend),
                    _ => faults.disarm(),
                }
                if w == 0 && i == 5 {
                    faults.disarm();
                }
                let id = if w == 0 && (i == 5 || i == 10) {
                    let size = if i == 5 { 1_000 } else { 150 };
                    large_transaction(&m, &tables.0, size, &serial).await
                } else {
                    let roll_back = rng.random_bool(0.2);
                    random_transaction(
                        &m,
                        &[(tables.0.as_str(), false), (tables.1.as_str(), true)],
                        &mut rng,
                        6,
                        roll_back,
                        &serial,
                    )
                    .await
                };
                ids.push(id);
                if faults.struck() {
                    struck += 1;
                }
                faults.disarm();
            }
            (ids, struck)
        }));
    }
    // Writes outside the library meanwhile (refused on a locked item, as an application that
    // respects the locks would do).
    let outside = {
        let client = env.client.clone();
        let table = env.table.clone();
        let serial = serial.clone();
        tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut written = 0;
            for _ in 0..20 {
                let v = serial.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let r = client
                    .put_item()
                    .table_name(&table)
                    .item("Id", s(&format!("k{}", rng.random_range(0..10))))
                    .item("v", n(v))
                    .condition_expression("attribute_not_exists(#t)")
                    .expression_attribute_names("#t", "_TxId")
                    .send()
                    .await;
                written += usize::from(r.is_ok());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            written
        })
    };
    let mut ids = Vec::new();
    let mut struck = 0;
    let outside_writes = outside.await.unwrap();
    for h in handles {
        let (i, s) = h.await.unwrap();
        ids.extend(i);
        struck += s;
    }
    // Everyone is gone: the sweeper finishes what they left.
    sweep_left_work(&env, &[&env.table, &env.range_table]).await;
    let committed = committed_ids(&env.manager, &ids).await;
    println!(
        "{} transactions, {} committed, {struck} faults struck",
        ids.len(),
        committed.len()
    );
    assert!(struck > 0, "faults struck");
    // Enough for the replay to mean something: about 60% commit on a quiet machine, a third on
    // a loaded one (a slow coordinator is wounded or rolled back more often).
    assert!(committed.len() > ids.len() / 5, "enough committed");
    assert!(committed.len() < ids.len(), "some rolled back");
    let fast = marked_fast_path(&env.client, env.manager.transactions_table(), &ids).await;
    println!("{fast} committed on the fast path, marked");
    assert!(
        fast >= 1,
        "a fast-path transaction among the committed ones"
    );

    let tables = [env.table.as_str(), env.range_table.as_str()];
    let mut feed = feed(env.manager.transactions_table(), &tables)
        .build()
        .unwrap();
    let changes = drain(&mut feed).await;
    assert_clean(&changes);
    let yielded: Vec<TxId> = changes
        .iter()
        .filter_map(|c| c.transaction_id().cloned())
        .collect();
    let distinct: HashSet<TxId> = yielded.iter().cloned().collect();
    assert_eq!(yielded.len(), distinct.len(), "each transaction once");
    let missing: Vec<_> = committed.difference(&distinct).collect();
    let extra: Vec<_> = distinct.difference(&committed).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "exactly the committed transactions: missing {missing:?}, not committed {extra:?}"
    );
    // Whole: a committed transaction's items are those its writes changed; each write put a
    // value never written before, so no value of a rolled-back or unfinished one appears.
    let mut state = HashMap::new();
    replay(&mut state, &changes, true);
    let mut expected = scan(&env.client, &env.table, &["Id"]).await;
    expected.extend(scan(&env.client, &env.range_table, &["Id", "RangeAttr"]).await);
    assert_eq!(state.len(), expected.len(), "as many items");
    for (k, v) in &expected {
        assert_eq!(state.get(k), Some(v), "item {k}");
    }
    let big = changes.iter().filter(|c| c.items().len() >= 150).count();
    let singles = changes
        .iter()
        .filter(|c| c.transaction_id().is_none())
        .count();
    println!(
        "{} changes; transactions of 150 items or more: {big}; single writes: {singles}",
        changes.len()
    );
    assert!(big >= 1, "a large transaction committed");
    assert!(
        changes.iter().any(|c| c.items().len() == 1_000),
        "the 1,000-item transaction, whole"
    );
    assert_eq!(singles, outside_writes, "every outside write");
}
