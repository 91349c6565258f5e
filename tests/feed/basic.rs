//! What the feed delivers for each kind of write.

use std::collections::HashMap;
use std::time::Duration;

use dynamodb_transactions::feed::{Change, ChangeFeed};

use crate::common::TestEnv;
use crate::*;

async fn outside_put(env: &TestEnv, id: &str, v: i64) {
    env.client
        .put_item()
        .table_name(&env.table)
        .item("Id", s(id))
        .item("v", n(v))
        .send()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_transaction_is_delivered_once_and_whole_with_its_items_before_and_after() {
    let env = TestEnv::new("feed-commit").await;
    enable_stream(&env.client, &env.table).await;
    enable_stream(&env.client, &env.range_table).await;
    outside_put(&env, "a", 1).await;
    outside_put(&env, "c", 3).await;

    let tx = env.manager.begin();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .update_expression("SET v = v + :d")
        .expression_attribute_values(":d", n(10))
        .send()
        .await
        .unwrap();
    tx.put_item()
        .table_name(&env.table)
        .item("Id", s("b"))
        .item("v", n(2))
        .send()
        .await
        .unwrap();
    tx.delete_item()
        .table_name(&env.table)
        .key("Id", s("c"))
        .send()
        .await
        .unwrap();
    tx.put_item()
        .table_name(&env.range_table)
        .item("Id", s("r"))
        .item("RangeAttr", n(1))
        .item("v", n(7))
        .send()
        .await
        .unwrap();
    let id = tx.id().clone();
    tx.commit().await.unwrap();

    let mut feed = feed(
        env.manager.transactions_table(),
        &[&env.table, &env.range_table],
    )
    .build()
    .unwrap();
    let changes = drain(&mut feed).await;
    assert_clean(&changes);
    let txs: Vec<_> = changes
        .iter()
        .filter(|c| c.transaction_id().is_some())
        .collect();
    assert_eq!(txs.len(), 1, "one transaction: {changes:#?}");
    let Change::Transaction { id: got, items } = txs[0] else {
        unreachable!()
    };
    assert_eq!(got, &id);
    assert_eq!(items.len(), 4, "every item it wrote: {items:#?}");
    let by_key: HashMap<_, _> = items.iter().map(|i| (ident(&i.table, &i.key), i)).collect();
    let a = by_key[&ident(&env.table, &[("Id".to_string(), s("a"))].into())];
    assert_eq!(a.before.as_ref().unwrap()["v"], n(1));
    assert_eq!(a.after.as_ref().unwrap()["v"], n(11));
    let b = by_key[&ident(&env.table, &[("Id".to_string(), s("b"))].into())];
    assert_eq!(b.before, None);
    assert_eq!(b.after.as_ref().unwrap()["v"], n(2));
    let c = by_key[&ident(&env.table, &[("Id".to_string(), s("c"))].into())];
    assert_eq!(c.before.as_ref().unwrap()["v"], n(3));
    assert_eq!(c.after, None);
    // The two outside writes come first, as single changes.
    let singles: Vec<_> = changes
        .iter()
        .filter(|c| matches!(c, Change::Single(_)))
        .collect();
    assert_eq!(singles.len(), 2, "{changes:#?}");
    // Replaying the feed rebuilds both tables.
    let mut state = HashMap::new();
    replay(&mut state, &changes, true);
    let mut expected = scan(&env.client, &env.table, &["Id"]).await;
    expected.extend(scan(&env.client, &env.range_table, &["Id", "RangeAttr"]).await);
    assert_eq!(state, expected);
}

/// Regression: a feed stopping when idle stopped while it held a committed transaction that was
/// only waiting for the settle grace (its record deleted, so the items decide), and never
/// delivered it: the idle time ran from the transaction's last record, the grace too, and the
/// idle time was the shorter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feed_stopping_when_idle_first_delivers_a_transaction_waiting_for_its_grace() {
    let env = TestEnv::new("feed-grace").await;
    enable_stream(&env.client, &env.table).await;
    let tx = env.manager.begin();
    tx.put_item()
        .table_name(&env.table)
        .item("Id", s("a"))
        .item("v", n(1))
        .send()
        .await
        .unwrap();
    let id = tx.id().clone();
    tx.commit().await.unwrap();
    assert!(env.manager.delete_transaction(&id).await.unwrap());

    let mut feed = feed(env.manager.transactions_table(), &[&env.table])
        .stop_when_idle(Duration::from_secs(1))
        .settle_grace(Duration::from_secs(3))
        .build()
        .unwrap();
    let changes = drain(&mut feed).await;
    assert_eq!(changes.len(), 1, "{changes:#?}");
    assert_eq!(changes[0].transaction_id(), Some(&id));
    let items = changes[0].items();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].before, None);
    assert_eq!(items[0].after.as_ref().map(|a| a["v"].clone()), Some(n(1)));
}

/// `tx`'s locked read of item `id` of the table; the item, if any.
async fn read(env: &TestEnv, tx: &dynamodb_transactions::Transaction, id: &str) -> Option<Item> {
    tx.get_item()
        .table_name(&env.table)
        .key("Id", s(id))
        .send()
        .await
        .unwrap()
        .item()
        .cloned()
}

/// The first `n` changes of `feed`, each within 60 s (the tests that use it set a grace of an
/// hour: only a change that does not wait for it comes in time).
async fn first_changes(feed: &mut ChangeFeed, n: usize) -> Vec<Change> {
    let mut changes = Vec::new();
    while changes.len() < n {
        match tokio::time::timeout(Duration::from_secs(60), feed.next()).await {
            Ok(next) => changes.push(next.expect("next").expect("the feed goes on")),
            Err(_) => panic!("not delivered within 60 s (grace 1 h): {changes:#?}"),
        }
    }
    changes
}

/// Regression: a read-modify-write of one item committed without a record
/// (`Settings::record_on_demand`: one conditional write applies it and removes the lock) was
/// delivered only after the settle grace, as a transaction whose record is gone, and held every
/// later change of its item back that long. Its commit marks the item with the transaction's id,
/// so it goes at once, and so does a read alone, committed or rolled back (released by a marked
/// write, nothing to say).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_modify_write_without_record_goes_without_waiting_for_the_grace() {
    let env = TestEnv::with_settings("feed-norec", |s| s.record_on_demand = true).await;
    enable_stream(&env.client, &env.table).await;
    outside_put(&env, "a", 1).await;
    outside_put(&env, "b", 5).await;
    let tx = env.manager.begin();
    assert_eq!(read(&env, &tx, "a").await.unwrap()["v"], n(1));
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .update_expression("SET v = :v")
        .expression_attribute_values(":v", n(2))
        .send()
        .await
        .unwrap();
    let id = tx.id().clone();
    tx.commit().await.unwrap();
    assert_eq!(env.tx_state(&id).await, None, "committed without a record");
    let read_alone = env.manager.begin();
    read(&env, &read_alone, "b").await;
    read_alone.commit().await.unwrap();
    outside_put(&env, "b", 6).await;
    // A read of c rolled back by its coordinator: its release is marked too.
    outside_put(&env, "c", 7).await;
    let rolled_back = env.manager.begin();
    read(&env, &rolled_back, "c").await;
    rolled_back.rollback().await.unwrap();
    outside_put(&env, "c", 8).await;

    // A grace far longer than the test: only a transaction known committed can go.
    let mut feed = feed(env.manager.transactions_table(), &[&env.table])
        .settle_grace(Duration::from_secs(3_600))
        .build()
        .unwrap();
    let changes = first_changes(&mut feed, 6).await;
    assert_clean(&changes);
    let tx_changes: Vec<_> = changes
        .iter()
        .filter(|c| c.transaction_id().is_some())
        .collect();
    assert_eq!(tx_changes.len(), 1, "{changes:#?}");
    assert_eq!(tx_changes[0].transaction_id(), Some(&id));
    let items = tx_changes[0].items();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].before.as_ref().map(|b| b["v"].clone()), Some(n(1)));
    assert_eq!(items[0].after.as_ref().map(|a| a["v"].clone()), Some(n(2)));
    // The outside writes: a, b and c put, then b's and c's after the read alone released b and
    // the rollback c.
    let mut singles: Vec<String> = changes
        .iter()
        .filter(|c| matches!(c, Change::Single(_)))
        .map(|c| {
            c.items()[0].after.as_ref().unwrap()["v"]
                .as_n()
                .unwrap()
                .clone()
        })
        .collect();
    singles.sort();
    assert_eq!(singles, ["1", "5", "6", "7", "8"], "{changes:#?}");
}

/// Regression: a lock taken without a record whose coordinator went away was released by a
/// contender under a tombstone, unmarked; the feed found no record for its holder and held the
/// item's later changes (the contender's own commit among them) back for the settle grace. The
/// release is marked with the holder's id, as the holder's own rollback would be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_without_record_released_by_a_contender_holds_nothing_back() {
    let env = TestEnv::with_settings("feed-tomb", |s| s.record_on_demand = true).await;
    enable_stream(&env.client, &env.table).await;
    outside_put(&env, "d", 1).await;
    let gone = env.manager.begin();
    read(&env, &gone, "d").await;
    let gone_id = gone.id().clone();
    gone.abandon();
    // A contender writes d: it gives the holder its grace, tombstones it and releases its lock.
    let (m2, _) = env.second_coordinator();
    let tx = m2.begin();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("d"))
        .update_expression("SET v = :v")
        .expression_attribute_values(":v", n(2))
        .send()
        .await
        .unwrap();
    let id = tx.id().clone();
    tx.commit().await.unwrap();
    assert!(
        env.manager
            .transaction_state(&gone_id)
            .await
            .unwrap()
            .is_none(),
        "no record for the holder that went away"
    );
    outside_put(&env, "d", 3).await;

    let mut feed = feed(env.manager.transactions_table(), &[&env.table])
        .settle_grace(Duration::from_secs(3_600))
        .build()
        .unwrap();
    let changes = first_changes(&mut feed, 3).await;
    assert_clean(&changes);
    let after = |c: &Change| c.items()[0].after.as_ref().unwrap()["v"].clone();
    assert!(matches!(changes[0], Change::Single(_)), "{changes:#?}");
    assert_eq!(after(&changes[0]), n(1));
    assert_eq!(changes[1].transaction_id(), Some(&id), "{changes:#?}");
    assert_eq!(after(&changes[1]), n(2));
    assert!(matches!(changes[2], Change::Single(_)), "{changes:#?}");
    assert_eq!(after(&changes[2]), n(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_transaction_yields_nothing_not_even_the_values_it_applied() {
    let env = TestEnv::new("feed-rollback").await;
    enable_stream(&env.client, &env.table).await;
    outside_put(&env, "a", 1).await;
    // Applied at once (it returns the new item), then rolled back: the stream shows 666 on the
    // item for a while.
    let tx = env.manager.begin();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .update_expression("SET v = :v")
        .expression_attribute_values(":v", n(666))
        .return_values(aws_sdk_dynamodb::types::ReturnValue::AllNew)
        .send()
        .await
        .unwrap();
    tx.put_item()
        .table_name(&env.table)
        .item("Id", s("new"))
        .item("v", n(666))
        .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld)
        .send()
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    outside_put(&env, "a", 2).await;

    let mut feed = feed(env.manager.transactions_table(), &[&env.table])
        .build()
        .unwrap();
    let changes = drain(&mut feed).await;
    assert_clean(&changes);
    assert!(
        changes.iter().all(|c| c.transaction_id().is_none()),
        "no transaction: {changes:#?}"
    );
    // Compared value by value: the table names are random and may contain "666".
    let never_committed = n(666);
    assert!(
        changes
            .iter()
            .flat_map(|c| c.items())
            .flat_map(|it| it.before.iter().chain(&it.after))
            .all(|image| image.get("v") != Some(&never_committed)),
        "a value never committed: {changes:#?}"
    );
    let afters: Vec<_> = changes
        .iter()
        .map(|c| c.items()[0].after.as_ref().map(|a| a["v"].clone()))
        .collect();
    assert_eq!(afters, [Some(n(1)), Some(n(2))]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_phased_commit_and_transactions_sharing_an_item_come_in_commit_order() {
    // Phased commits (no one-request commit), applied before the flip (no roll-forward).
    let env = TestEnv::with_settings("feed-phased", |s| {
        s.one_shot_max_items = 0;
        s.roll_forward = false;
    })
    .await;
    enable_stream(&env.client, &env.table).await;
    let mut ids = Vec::new();
    for round in 0..3 {
        let tx = env.manager.begin();
        for item in ["x", "y"] {
            tx.put_item()
                .table_name(&env.table)
                .item("Id", s(item))
                .item("v", n(round))
                .send()
                .await
                .unwrap();
        }
        ids.push(tx.id().clone());
        tx.commit().await.unwrap();
    }
    let mut feed = feed(env.manager.transactions_table(), &[&env.table])
        .build()
        .unwrap();
    let changes = drain(&mut feed).await;
    assert_clean(&changes);
    let got: Vec<_> = changes
        .iter()
        .filter_map(|c| c.transaction_id().cloned())
        .collect();
    assert_eq!(got, ids, "in commit order: {changes:#?}");
    let mut state = HashMap::new();
    replay(&mut state, &changes, true);
    assert_eq!(state, scan(&env.client, &env.table, &["Id"]).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_path_transaction_is_delivered_whole_and_a_later_outside_update_is_single() {
    use dynamodb_transactions::IsolationLevel;
    // Default settings but the fast path (the test environment turns it off): the tables have
    // streams, so the fast path marks its writes.
    let env = TestEnv::with_settings("feed-fast", |s| s.write_only_fast_path = true).await;
    enable_stream(&env.client, &env.table).await;
    enable_stream(&env.client, &env.range_table).await;
    outside_put(&env, "u", 1).await;
    outside_put(&env, "d", 4).await;
    let key = |id: &str| -> dynamodb_transactions::Item { [("Id".to_string(), s(id))].into() };

    // Puts and an update over two tables, in one request.
    let tx = env.manager.begin();
    tx.put_item()
        .table_name(&env.table)
        .item("Id", s("p"))
        .item("v", n(1))
        .send()
        .await
        .unwrap();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("u"))
        .update_expression("SET v = v + :d")
        .expression_attribute_values(":d", n(10))
        .send()
        .await
        .unwrap();
    tx.put_item()
        .table_name(&env.range_table)
        .item("Id", s("r"))
        .item("RangeAttr", n(1))
        .item("v", n(7))
        .send()
        .await
        .unwrap();
    let fast = tx.id().clone();
    tx.commit().await.unwrap();
    // It took the fast path (the profile's conflicts could send it to the locking path): marked.
    let raw = env.raw_get(&env.table, &key("u")).await.unwrap();
    assert_eq!(raw["_TxM"], s(fast.as_str()), "marked: {raw:?}");
    // Library reads never show the mark.
    for level in [IsolationLevel::Uncommitted, IsolationLevel::Committed] {
        let got = env
            .manager
            .get_item()
            .table_name(&env.table)
            .key("Id", s("u"))
            .isolation(level)
            .consistent_read(true)
            .send()
            .await
            .unwrap()
            .item
            .unwrap();
        assert_eq!(
            got,
            [("Id".to_string(), s("u")), ("v".to_string(), n(11))].into()
        );
    }

    // An outside update of a marked item keeps the mark: a single change, not the transaction.
    env.client
        .update_item()
        .table_name(&env.table)
        .key("Id", s("u"))
        .update_expression("SET w = :w")
        .expression_attribute_values(":w", n(5))
        .send()
        .await
        .unwrap();

    // A write-only transaction with a delete: still delivered whole (it takes the locking path).
    let tx = env.manager.begin();
    tx.delete_item()
        .table_name(&env.table)
        .key("Id", s("d"))
        .send()
        .await
        .unwrap();
    tx.put_item()
        .table_name(&env.table)
        .item("Id", s("q"))
        .item("v", n(2))
        .send()
        .await
        .unwrap();
    let with_delete = tx.id().clone();
    tx.commit().await.unwrap();

    let mut feed = feed(
        env.manager.transactions_table(),
        &[&env.table, &env.range_table],
    )
    .build()
    .unwrap();
    let changes = drain(&mut feed).await;
    assert_clean(&changes);
    let txs: Vec<_> = changes
        .iter()
        .filter_map(|c| c.transaction_id().cloned())
        .collect();
    assert_eq!(txs, [fast.clone(), with_delete.clone()], "{changes:#?}");
    let items_of = |id: &dynamodb_transactions::TxId| {
        changes
            .iter()
            .find_map(|c| match c {
                Change::Transaction { id: got, items } if got == id => Some(
                    items
                        .iter()
                        .map(|i| (ident(&i.table, &i.key), i.clone()))
                        .collect::<HashMap<_, _>>(),
                ),
                _ => None,
            })
            .unwrap()
    };
    let first = items_of(&fast);
    assert_eq!(first.len(), 3, "every item it wrote: {first:#?}");
    let p = &first[&ident(&env.table, &key("p"))];
    assert_eq!(
        (p.before.clone(), p.after.clone()),
        (
            None,
            Some([("Id".to_string(), s("p")), ("v".to_string(), n(1))].into())
        )
    );
    let u = &first[&ident(&env.table, &key("u"))];
    assert_eq!(u.before.as_ref().unwrap()["v"], n(1));
    assert_eq!(u.after.as_ref().unwrap()["v"], n(11));
    let r = first
        .values()
        .find(|i| i.table == env.range_table)
        .expect("the item of the second table");
    assert_eq!(r.before, None);
    assert_eq!(r.after.as_ref().unwrap()["v"], n(7));
    let second = items_of(&with_delete);
    assert_eq!(second.len(), 2, "{second:#?}");
    assert_eq!(second[&ident(&env.table, &key("d"))].after, None);
    // The outside writes: the two puts first, then the update of `u` after the transaction.
    let singles: Vec<_> = changes
        .iter()
        .filter_map(|c| match c {
            Change::Single(i) => Some(i),
            _ => None,
        })
        .collect();
    assert_eq!(singles.len(), 3, "{changes:#?}");
    assert_eq!(singles[2].before.as_ref().unwrap()["v"], n(11));
    assert_eq!(singles[2].after.as_ref().unwrap()["w"], n(5));
    let pos = |f: &dyn Fn(&Change) -> bool| changes.iter().position(f).unwrap();
    assert!(
        pos(&|c| c.transaction_id() == Some(&fast))
            < pos(
                &|c| matches!(c, Change::Single(i) if i.after.as_ref().is_some_and(|a| a.contains_key("w")))
            )
    );
    let mut state = HashMap::new();
    replay(&mut state, &changes, true);
    let mut expected = scan(&env.client, &env.table, &["Id"]).await;
    expected.extend(scan(&env.client, &env.range_table, &["Id", "RangeAttr"]).await);
    assert_eq!(state, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_without_a_stream_is_refused() {
    let env = TestEnv::new("feed-nostream").await;
    let mut feed = feed(env.manager.transactions_table(), &[&env.table])
        .build()
        .unwrap();
    let e = feed.next().await.unwrap_err();
    assert!(e.is_invalid_request(), "{e}");
    assert!(e.to_string().contains("NEW_AND_OLD_IMAGES"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_feed_ends_when_its_table_is_deleted() {
    let env = TestEnv::new("feed-end").await;
    enable_stream(&env.client, &env.table).await;
    outside_put(&env, "a", 1).await;
    let mut feed = ChangeFeed::builder(crate::common::client())
        .table(&env.table)
        .transactions_table(env.manager.transactions_table())
        .streams_client(streams_client())
        .from_start()
        .poll_interval(Duration::from_millis(100))
        .build()
        .unwrap();
    let first = feed.next().await.unwrap();
    assert!(matches!(first, Some(Change::Single(_))), "{first:?}");
    env.client
        .delete_table()
        .table_name(&env.table)
        .send()
        .await
        .unwrap();
    let end = tokio::time::timeout(std::time::Duration::from_secs(60), drain(&mut feed))
        .await
        .expect("the feed ends once its stream is closed and read");
    assert!(end.is_empty(), "{end:?}");
}

/// Increments of one counter by eight coordinators at once, with `Settings::hand_over`: most
/// commits hand the item to the next holder in the write that applies them (the stream shows
/// the item going from one lock to another). Each increment is delivered once, whole, without
/// waiting for the settle grace, and in commit order: every change starts where the one before
/// ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_handed_over_from_holder_to_holder_comes_in_commit_order() {
    let env = TestEnv::with_settings("feed-handed", |s| {
        s.record_on_demand = true;
        s.hand_over = true;
    })
    .await;
    enable_stream(&env.client, &env.table).await;
    outside_put(&env, "k", 0).await;
    let (workers, each) = (8, 5);
    let runs = (0..workers).map(|_| {
        let (m, table) = (env.manager.clone(), env.table.clone());
        async move {
            for _ in 0..each {
                m.run(async |tx| {
                    let got = tx
                        .get_item()
                        .table_name(&table)
                        .key("Id", s("k"))
                        .send()
                        .await?;
                    let v: i64 = got.item().unwrap()["v"].as_n().unwrap().parse().unwrap();
                    tx.update_item()
                        .table_name(&table)
                        .key("Id", s("k"))
                        .update_expression("SET v = :v")
                        .expression_attribute_values(":v", n(v + 1))
                        .send()
                        .await?;
                    Ok(())
                })
                .await
                .unwrap();
            }
        }
    });
    futures::future::join_all(runs).await;
    let total = workers * each;

    let mut feed = feed(env.manager.transactions_table(), &[&env.table])
        .settle_grace(Duration::from_secs(3_600))
        .build()
        .unwrap();
    let changes = first_changes(&mut feed, 1 + total as usize).await;
    assert_clean(&changes);
    let v =
        |img: &Option<Item>| -> i64 { img.as_ref().unwrap()["v"].as_n().unwrap().parse().unwrap() };
    let steps: Vec<(i64, i64)> = changes
        .iter()
        .filter(|c| c.transaction_id().is_some())
        .map(|c| {
            let items = c.items();
            assert_eq!(items.len(), 1, "{c:?}");
            (v(&items[0].before), v(&items[0].after))
        })
        .collect();
    let expected: Vec<(i64, i64)> = (0..total as i64).map(|i| (i, i + 1)).collect();
    assert_eq!(steps, expected, "{changes:#?}");
}
