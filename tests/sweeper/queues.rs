//! Waiters' queue entries (`_TxQ`, `Settings::wait_in_ticket_order`) left on items nobody locks
//! again: an entry stops counting once it expires, and a sweep of the item's table takes the
//! expired entries off an unlocked item (a locked item's queue is written back by its unlock).

use std::collections::HashMap;

use super::*;

/// `k` with `v`, carrying queue entries `(ticket, expiry in ms from now)` as a waiter's rewrite
/// leaves them (`_TxQ`, its oldest entry `_TxQF`, version `_TxQV` 1).
fn queued(k: &str, v: &str, entries: &[(u64, i64)]) -> Item {
    let now = now_ms() as i64;
    let mut i = item(&[("Id", s(k)), ("v", s(v))]);
    let q: HashMap<String, AttributeValue> = entries
        .iter()
        .map(|(t, e)| (t.to_string(), n(now + e)))
        .collect();
    let (t, e) = entries.iter().min().expect("an entry");
    let first = [
        ("t".to_string(), n(*t as i64)),
        ("e".to_string(), n(now + e)),
    ];
    i.insert("_TxQ".into(), AttributeValue::M(q));
    i.insert("_TxQF".into(), AttributeValue::M(first.into()));
    i.insert("_TxQV".into(), n(1));
    i
}

/// A sweep of the table takes expired entries off unlocked items and keeps live ones (a dry run
/// counts without writing); an item whose entries have all expired keeps only the queue's
/// version; a locked item's queue is left to its holder, and swept once the item is unlocked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_takes_expired_queue_entries_off_unlocked_items() {
    let env = TestEnv::new("sweep-queue").await;
    let dead = queued("dead", "a", &[(7, -1_000), (9, -500)]);
    let mixed = queued("mixed", "b", &[(3, -1_000), (8, 60_000)]);
    let locked = queued("locked", "c", &[(4, -1_000)]);
    for i in [&dead, &mixed, &locked] {
        env.raw_put(&env.table, i.clone()).await;
    }
    let scan = || SweepOptions::new().tables_to_scan([env.table.clone()]);

    // Locked by a pending transaction: its queue is its holder's to write back.
    let holder = env.manager.begin();
    holder
        .get_item()
        .table_name(&env.table)
        .key("Id", s("locked"))
        .send()
        .await
        .unwrap();
    let dry = env.manager.sweep(&scan().dry_run(true)).await.unwrap();
    assert_eq!(dry.queue_entries_removed, 3, "{dry:?}");
    assert_eq!(env.raw_get(&env.table, &key("dead")).await, Some(dead));

    let report = env.manager.sweep(&scan()).await.unwrap();
    assert!(report.errors.is_empty(), "{report:?}");
    assert_eq!(report.queue_entries_removed, 3, "{report:?}");
    assert_eq!(
        env.raw_get(&env.table, &key("dead")).await.unwrap(),
        item(&[("Id", s("dead")), ("v", s("a")), ("_TxQV", n(2))])
    );
    let left = env.raw_get(&env.table, &key("mixed")).await.unwrap();
    let q = left["_TxQ"].as_m().unwrap();
    assert_eq!(q.keys().collect::<Vec<_>>(), vec!["8"], "{left:?}");
    assert_eq!(left["_TxQF"].as_m().unwrap()["t"], n(8), "{left:?}");
    assert_eq!(left["v"], s("b"));

    let again = env.manager.sweep(&scan()).await.unwrap();
    assert_eq!(again.queue_entries_removed, 0, "{again:?}");
    let raw = env.raw_get(&env.table, &key("locked")).await.unwrap();
    assert_eq!(raw["_TxQ"], locked["_TxQ"], "{raw:?}");
    // Unlocked (by a manager that keeps no queues, so its unlock leaves the queue as it was),
    // the next sweep takes the expired entry off.
    holder.commit().await.unwrap();
    let last = env.manager.sweep(&scan()).await.unwrap();
    assert_eq!(last.queue_entries_removed, 1, "{last:?}");
    assert_eq!(
        env.raw_get(&env.table, &key("locked")).await.unwrap(),
        item(&[("Id", s("locked")), ("v", s("c")), ("_TxQV", n(2))])
    );
}
