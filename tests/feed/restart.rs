//! Restarts: a consumer killed at any point and resumed from its checkpoint loses nothing, splits
//! nothing, and gets again only whole transactions (same id, same items).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicI64;

use dynamodb_transactions::feed::{Change, MemoryCheckpoint, TableCheckpoint};
use rand::{Rng, SeedableRng};

use crate::common::{TestEnv, sweep_left_work, unique_name};
use crate::*;

/// Thirty transactions of 1 to 4 items over two tables, a quarter rolled back after applying,
/// with outside writes between them; two coordinators at once.
async fn workload(env: &TestEnv, seed: u64) -> Vec<dynamodb_transactions::TxId> {
    let tables = [
        (env.table.as_str(), false),
        (env.range_table.as_str(), true),
    ];
    let serial = AtomicI64::new(1);
    let run = |worker: u64| {
        let tables = &tables;
        let serial = &serial;
        async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed * 10 + worker);
            let mut ids = Vec::new();
            for _ in 0..15 {
                let roll_back = rng.random_bool(0.25);
                ids.push(
                    random_transaction(&env.manager, tables, &mut rng, 4, roll_back, serial).await,
                );
                if rng.random_bool(0.3) {
                    let v = serial.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    // An outside write; refused while a transaction holds the item.
                    let _ = env
                        .client
                        .put_item()
                        .table_name(&env.table)
                        .item("Id", s(&format!("k{}", rng.random_range(0..10))))
                        .item("v", n(v))
                        .condition_expression("attribute_not_exists(#t)")
                        .expression_attribute_names("#t", "_TxId")
                        .send()
                        .await;
                }
            }
            ids
        }
    };
    let (a, b) = tokio::join!(run(1), run(2));
    a.into_iter().chain(b).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_killed_anywhere_resumes_from_its_checkpoint_without_loss_or_split() {
    // The fast path on (the test environment turns it off): write-only transactions without a
    // delete commit in one request, marked for the feed.
    let env = TestEnv::with_settings("feed-restart", |s| s.write_only_fast_path = true).await;
    killed_and_resumed(&env, 11).await;
}

/// The workload, a reference run of the feed, then a consumer killed after every few changes.
async fn killed_and_resumed(env: &TestEnv, seed: u64) {
    enable_stream(&env.client, &env.table).await;
    enable_stream(&env.client, &env.range_table).await;
    let ids = workload(env, seed).await;
    // A transaction whose commit failed (a timeout on a loaded machine) may have left its locks:
    // the sweeper finishes it, as in production, so that the tables hold only settled items.
    sweep_left_work(env, &[]).await;
    let committed = committed_ids(&env.manager, &ids).await;
    let tables = [env.table.as_str(), env.range_table.as_str()];
    let tx_table = env.manager.transactions_table();
    if env.manager.settings().write_only_fast_path {
        let fast = marked_fast_path(&env.client, tx_table, &ids).await;
        println!("{} committed, {fast} on the fast path", committed.len());
        assert!(
            fast >= 1,
            "a fast-path transaction among the committed ones"
        );
    }

    // Once through, without a restart.
    let mut whole = feed_through(env.client.clone(), tx_table, &tables)
        .build()
        .unwrap();
    let reference = drain(&mut whole).await;
    assert_clean(&reference);
    let by_id: HashMap<_, _> = reference
        .iter()
        .filter_map(|c| c.transaction_id().map(|id| (id.clone(), c.clone())))
        .collect();
    let yielded: HashSet<_> = by_id.keys().cloned().collect();
    assert_eq!(yielded, committed, "exactly the committed transactions");
    assert_eq!(
        by_id.len(),
        reference
            .iter()
            .filter(|c| c.transaction_id().is_some())
            .count()
    );

    // Killed after 0 to 3 changes, each time, checkpointing after some of them.
    let checkpoint = MemoryCheckpoint::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut effective: Vec<Change> = Vec::new();
    let mut restarts = 0;
    loop {
        let mut f = feed_through(env.client.clone(), tx_table, &tables)
            .checkpoint(checkpoint.clone())
            .build()
            .unwrap();
        restarts += 1;
        let mut unsaved = Vec::new();
        let take = rng.random_range(0..4);
        let mut ended = false;
        for _ in 0..take {
            match f.next().await.unwrap() {
                Some(c) => {
                    if let Some(id) = c.transaction_id() {
                        assert_eq!(Some(&c), by_id.get(id), "delivered again whole, the same");
                    }
                    unsaved.push(c);
                    if rng.random_bool(0.5) {
                        f.checkpoint().await.unwrap();
                        effective.append(&mut unsaved);
                    }
                }
                None => {
                    f.checkpoint().await.unwrap();
                    effective.append(&mut unsaved);
                    ended = true;
                    break;
                }
            }
        }
        if ended {
            break;
        }
        // Killed: what was not saved comes again.
        assert!(restarts < 500, "the feed makes progress");
    }
    assert!(restarts > 10, "restarted at many points ({restarts})");
    assert_clean(&effective);
    let ids_once: Vec<_> = effective
        .iter()
        .filter_map(|c| c.transaction_id().cloned())
        .collect();
    let distinct: HashSet<_> = ids_once.iter().cloned().collect();
    assert_eq!(
        ids_once.len(),
        distinct.len(),
        "no transaction twice in the saved sequence"
    );
    assert_eq!(distinct, committed, "nothing lost");
    // The same changes as without restarts (a multiset: items of different shards may come in
    // another order between transactions that share no item).
    assert_eq!(
        reference.len(),
        effective.len(),
        "as many changes as without restarts"
    );
    let mut left = reference.clone();
    for c in &effective {
        let i = left
            .iter()
            .position(|r| r == c)
            .unwrap_or_else(|| panic!("a change the run without restarts did not yield: {c:?}"));
        left.swap_remove(i);
    }
    let mut state = HashMap::new();
    replay(&mut state, &effective, true);
    let mut expected = scan(&env.client, &env.table, &["Id"]).await;
    expected.extend(scan(&env.client, &env.range_table, &["Id", "RangeAttr"]).await);
    assert_eq!(state, expected, "the saved sequence rebuilds both tables");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_table_checkpoint_keeps_the_position() {
    let env = TestEnv::new("feed-ckpt").await;
    enable_stream(&env.client, &env.table).await;
    let checkpoints = unique_name("feed-ckpt-table");
    env.guard.add(&checkpoints);
    let store = TableCheckpoint::new(env.client.clone(), &checkpoints, "test-feed");
    store.create_table().await.unwrap();
    store.create_table().await.unwrap();
    for i in 0..3 {
        let tx = env.manager.begin();
        tx.put_item()
            .table_name(&env.table)
            .item("Id", s(&format!("i{i}")))
            .item("v", n(i))
            .send()
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
    let tx_table = env.manager.transactions_table();
    let mut f = feed(tx_table, &[&env.table])
        .checkpoint(store.clone())
        .build()
        .unwrap();
    let first = f.next().await.unwrap().expect("a change");
    f.checkpoint().await.unwrap();
    drop(f);
    let mut f = feed(tx_table, &[&env.table])
        .checkpoint(store)
        .build()
        .unwrap();
    let rest = drain(&mut f).await;
    assert_eq!(rest.len(), 2, "{rest:#?}");
    assert!(!rest.contains(&first));
}
