//! Waiters' marks (`_TxH`, `Settings::mark_oldest_waiter`) left on items nobody locks again: a
//! waiter that dies while it waits leaves its mark, which the next lock of the item takes off; on
//! an item no lock takes again, a sweep of its table takes it off once it no longer counts
//! (expired) or was written `rollback_after` ago.

use std::time::Instant;

use super::*;

/// `k` with `v`, carrying the mark of `ticket` expiring `in_ms` from now (negative: expired).
fn marked(k: &str, v: &str, ticket: u64, in_ms: i64) -> Item {
    let e = now_ms() as i64 + in_ms;
    let mut i = item(&[("Id", s(k)), ("v", s(v))]);
    let mark = [("t".to_string(), n(ticket as i64)), ("e".to_string(), n(e))];
    i.insert("_TxH".into(), AttributeValue::M(mark.into()));
    i
}

/// A waiter whose coordinator dies while it waits (its future dropped) leaves its mark on the item;
/// the holder commits, and no lock takes the item again. A sweep that finishes everything now and
/// scans the table takes the mark off and leaves the item as the holder committed it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_takes_off_the_mark_of_a_waiter_that_died() {
    let env = TestEnv::with_settings("sweep-mark-dead", |s| {
        s.rollback_on_drop = false;
        s.lock_wait = Duration::from_secs(30);
        s.wound_grace = Duration::from_secs(60);
    })
    .await;
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", s("x"))]))
        .await;
    let holder = env.manager.begin();
    holder
        .get_item()
        .table_name(&env.table)
        .key("Id", s("k"))
        .send()
        .await
        .unwrap();
    // Younger than the holder (its ticket is drawn after), so it waits and marks the item.
    let (m, table) = (env.manager.clone(), env.table.clone());
    let waiter_id: std::sync::Arc<std::sync::Mutex<Option<TxId>>> = Default::default();
    let id_out = waiter_id.clone();
    let waiter = tokio::spawn(async move {
        let tx = m.begin();
        *id_out.lock().unwrap() = Some(tx.id().clone());
        let _ = tx
            .get_item()
            .table_name(&table)
            .key("Id", s("k"))
            .send()
            .await;
        tx.abandon();
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while !env
        .raw_get(&env.table, &key("k"))
        .await
        .is_some_and(|i| i.contains_key("_TxH"))
    {
        assert!(
            Instant::now() < deadline,
            "the waiter never marked the item"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The waiter's coordinator dies mid-wait. A look it had in flight still lands or fails:
    // let it, before the holder unlocks (one landing after the unlock takes the item, below).
    waiter.abort();
    let _ = waiter.await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let waiter_id = waiter_id.lock().unwrap().clone().unwrap();
    holder
        .update_item()
        .table_name(&env.table)
        .key("Id", s("k"))
        .update_expression("SET v = :h")
        .expression_attribute_values(":h", s("holder"))
        .send()
        .await
        .unwrap();
    holder.commit().await.unwrap();
    let left = env.raw_get(&env.table, &key("k")).await.unwrap();
    // The unlock leaves the mark; or a look of the dead waiter, still in flight, landed after
    // the unlock (conditional on its mark, which its lock takes off): the item is then locked by
    // the dead waiter's pending transaction, which the sweep rolls back.
    let late_look = !left.contains_key("_TxH");
    if late_look {
        assert_eq!(left["_TxId"], s(waiter_id.as_str()), "{left:?}");
    }

    let report = env
        .manager
        .sweep(&SweepOptions::finish_everything_now().tables_to_scan([env.table.clone()]))
        .await
        .unwrap();
    assert!(report.errors.is_empty(), "{report:?}");
    if late_look {
        assert!(report.rolled_back.contains(&waiter_id), "{report:?}");
    } else {
        assert_eq!(report.marks_removed, 1, "{report:?}");
        assert_eq!(report.items_scanned, 0, "no locked item: {report:?}");
    }
    assert_eq!(
        env.raw_get(&env.table, &key("k")).await.unwrap(),
        item(&[("Id", s("k")), ("v", s("holder"))])
    );
}

/// With the default `rollback_after` (minutes), a sweep takes off an expired mark and leaves a
/// live one, which may be a waiter's that is still waiting; a dry run counts without writing; a
/// sweep that rolls back everything at once (`rollback_after` zero) takes the live one off too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_takes_off_expired_marks_and_leaves_live_ones_until_rollback_after() {
    let env = TestEnv::new("sweep-mark-expired").await;
    let expired = marked("expired", "a", 7, -1_000);
    let live = marked("live", "b", 8, 60_000);
    env.raw_put(&env.table, expired.clone()).await;
    env.raw_put(&env.table, live.clone()).await;
    env.raw_put(&env.table, item(&[("Id", s("plain")), ("v", s("c"))]))
        .await;
    let scan = || SweepOptions::new().tables_to_scan([env.table.clone()]);

    let dry = env.manager.sweep(&scan().dry_run(true)).await.unwrap();
    assert_eq!(dry.marks_removed, 1, "{dry:?}");
    assert_eq!(
        env.raw_get(&env.table, &key("expired")).await,
        Some(expired)
    );

    let report = env.manager.sweep(&scan()).await.unwrap();
    assert!(report.errors.is_empty(), "{report:?}");
    assert_eq!(report.marks_removed, 1, "{report:?}");
    assert_eq!(
        env.raw_get(&env.table, &key("expired")).await.unwrap(),
        item(&[("Id", s("expired")), ("v", s("a"))])
    );
    assert_eq!(env.raw_get(&env.table, &key("live")).await, Some(live));

    let now = env
        .manager
        .sweep(&scan().rollback_after(Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(now.marks_removed, 1, "{now:?}");
    assert_eq!(
        env.raw_get(&env.table, &key("live")).await.unwrap(),
        item(&[("Id", s("live")), ("v", s("b"))])
    );
    assert_eq!(
        env.raw_get(&env.table, &key("plain")).await.unwrap(),
        item(&[("Id", s("plain")), ("v", s("c"))])
    );
}
