//! Reads outside transactions at `Uncommitted` and `Committed`: GetItem, Scan, Query and BatchGetItem
//! against every state an item can be in (the Java library's facade cases and more), projections,
//! filters evaluated on before-images, pagination, secondary indexes, and readers racing writers that
//! roll back half of their transactions.
mod common;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, GlobalSecondaryIndex, KeySchemaElement,
    KeyType, KeysAndAttributes, Projection, ProjectionType, ReturnValue, ScalarAttributeType,
};
use common::*;
use dynamodb_transactions::fault::FaultMode;
use dynamodb_transactions::{Error, IsolationLevel, Item, Transaction, TxId, TxState};
use futures::TryStreamExt;

const UNCOMMITTED: IsolationLevel = IsolationLevel::Uncommitted;
const COMMITTED: IsolationLevel = IsolationLevel::Committed;

fn v1(id: &str) -> Item {
    item(&[("Id", s(id)), ("s_someattr", s("val1")), ("n_other", n(1))])
}

fn v2(id: &str) -> Item {
    item(&[("Id", s(id)), ("s_someattr", s("val2")), ("n_other", n(2))])
}

/// What the Java tests project: `Id, s_someattr`.
fn projected(i: &Item) -> Item {
    i.iter()
        .filter(|(k, _)| *k == "Id" || *k == "s_someattr")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Reads item `id` of `env.table` four ways (GetItem, Scan of the whole table, Query on the key,
/// BatchGetItem), optionally with the projection `Id, s_someattr`.
async fn four_reads(
    env: &TestEnv,
    level: IsolationLevel,
    id: &str,
    projection: bool,
) -> Vec<Result<Vec<Item>, Error>> {
    let m = &env.manager;
    let proj = projection.then(|| "Id, #s".to_string());
    let names = projection.then(|| HashMap::from([("#s".to_string(), "s_someattr".to_string())]));
    let get = m
        .get_item()
        .table_name(&env.table)
        .key("Id", s(id))
        .set_projection_expression(proj.clone())
        .set_expression_attribute_names(names.clone())
        .isolation(level)
        .send()
        .await
        .map(|o| o.item.into_iter().collect());
    let mut scan = m
        .scan()
        .table_name(&env.table)
        .set_expression_attribute_names(names.clone())
        .isolation(level);
    let mut query = m
        .query()
        .table_name(&env.table)
        .key_condition_expression("Id = :id")
        .expression_attribute_values(":id", s(id))
        .set_expression_attribute_names(names.clone())
        .isolation(level);
    if let Some(p) = &proj {
        scan = scan.projection_expression(p);
        query = query.projection_expression(p);
    }
    let scan = scan.send_all().await;
    let query = query.send_all().await;
    let keys = KeysAndAttributes::builder()
        .keys(key(id))
        .set_projection_expression(proj)
        .set_expression_attribute_names(names)
        .build()
        .unwrap();
    let batch = m
        .batch_get_item()
        .request_items(&env.table, keys)
        .isolation(level)
        .send()
        .await
        .map(|mut o| o.responses.remove(&env.table).expect("table in responses"));
    vec![get, scan, query, batch]
}

/// Asserts every way of reading `id` at `level`, with and without projection, sees `expected`.
async fn assert_reads(env: &TestEnv, level: IsolationLevel, id: &str, expected: Option<&Item>) {
    for projection in [false, true] {
        let want: Vec<Item> = expected
            .map(|i| if projection { projected(i) } else { i.clone() })
            .into_iter()
            .collect();
        for (how, got) in ["GetItem", "Scan", "Query", "BatchGetItem"]
            .iter()
            .zip(four_reads(env, level, id, projection).await)
        {
            let got = got.unwrap_or_else(|e| panic!("{how} at {level:?} failed: {e}"));
            assert_eq!(
                got, want,
                "{how} at {level:?}, projection {projection}: wrong result"
            );
            assert!(
                got.iter().all(|i| !has_tx_attrs(i)),
                "{how}: _Tx attributes"
            );
        }
    }
}

/// A pending transaction that applied a change to `id` (an update returning ALL_NEW applies at once).
async fn pending_update(env: &TestEnv, id: &str) -> Transaction {
    let tx = env.manager.begin();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s(id))
        .update_expression("SET s_someattr = :s, n_other = :n")
        .expression_attribute_values(":s", s("val2"))
        .expression_attribute_values(":n", n(2))
        .return_values(ReturnValue::AllNew)
        .send()
        .await
        .unwrap();
    tx
}

#[tokio::test]
async fn committed_item_is_read_at_both_levels() {
    let env = TestEnv::new("iso-committed").await;
    env.raw_put(&env.table, v1("a")).await;
    assert_reads(&env, UNCOMMITTED, "a", Some(&v1("a"))).await;
    assert_reads(&env, COMMITTED, "a", Some(&v1("a"))).await;
}

#[tokio::test]
async fn pending_insert_is_seen_only_uncommitted() {
    let env = TestEnv::new("iso-insert").await;
    let tx = pending_update(&env, "a").await;
    let inserted = item(&[("Id", s("a")), ("s_someattr", s("val2")), ("n_other", n(2))]);
    assert_reads(&env, UNCOMMITTED, "a", Some(&inserted)).await;
    assert_reads(&env, COMMITTED, "a", None).await;
    tx.rollback().await.unwrap();
    assert_reads(&env, UNCOMMITTED, "a", None).await;
}

#[tokio::test]
async fn lock_placeholder_does_not_exist() {
    let env = TestEnv::new("iso-placeholder").await;
    let tx = env.manager.begin();
    // A read lock on an absent item inserts a placeholder.
    let got = tx
        .get_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .send()
        .await
        .unwrap();
    assert_eq!(got.item, None);
    assert!(
        env.raw_get(&env.table, &key("a")).await.is_some(),
        "placeholder stored"
    );
    assert_reads(&env, UNCOMMITTED, "a", None).await;
    assert_reads(&env, COMMITTED, "a", None).await;
    tx.rollback().await.unwrap();
}

#[tokio::test]
async fn pending_update_is_hidden_at_committed() {
    let env = TestEnv::new("iso-update").await;
    env.raw_put(&env.table, v1("a")).await;
    let tx = pending_update(&env, "a").await;
    assert_reads(&env, UNCOMMITTED, "a", Some(&v2("a"))).await;
    assert_reads(&env, COMMITTED, "a", Some(&v1("a"))).await;
    tx.commit().await.unwrap();
    assert_reads(&env, COMMITTED, "a", Some(&v2("a"))).await;
}

#[tokio::test]
async fn pending_delete_still_shows_the_item() {
    let env = TestEnv::new("iso-delete").await;
    env.raw_put(&env.table, v1("a")).await;
    let tx = env.manager.begin();
    tx.delete_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .return_values(ReturnValue::AllOld)
        .send()
        .await
        .unwrap();
    assert!(has_tx_attrs(
        &env.raw_get(&env.table, &key("a")).await.unwrap()
    ));
    assert_reads(&env, UNCOMMITTED, "a", Some(&v1("a"))).await;
    assert_reads(&env, COMMITTED, "a", Some(&v1("a"))).await;
    tx.commit().await.unwrap();
    assert_reads(&env, COMMITTED, "a", None).await;
}

/// Found by the model check (tests/model.rs): a phased delete of an item that did not exist marks
/// its placeholder (`_TxT` + `_TxA = "D"`); readers must still see no item, not an item holding only
/// its key.
#[tokio::test]
async fn pending_delete_of_an_absent_item_reads_as_absent() {
    let env = TestEnv::with_settings("iso-del-absent", |s| s.one_shot_max_items = 0).await;
    for k in 1..10 {
        let tx = env.manager.begin();
        let tx_id = tx.id().clone();
        tx.delete_item()
            .table_name(&env.table)
            .key("Id", s("gone"))
            .send()
            .await
            .unwrap();
        // Die before the flip: the delete is marked on the placeholder, the record pending.
        env.faults.crash_at(k, FaultMode::BeforeSend);
        let _ = tx.commit().await;
        env.faults.disarm();
        let raw = env.raw_get(&env.table, &key("gone")).await;
        let marked = raw
            .as_ref()
            .is_some_and(|r| r.get("_TxA") == Some(&s("D")) && r.contains_key("_TxT"));
        let state = env
            .manager
            .transaction_state(&tx_id)
            .await
            .unwrap()
            .map(|s| (s.state, s.finalized));
        if marked && matches!(state, Some((TxState::Pending, _))) {
            assert_reads(&env, UNCOMMITTED, "gone", None).await;
            assert_reads(&env, COMMITTED, "gone", None).await;
            env.manager.rollback_transaction(&tx_id).await.unwrap();
            assert_eq!(env.raw_get(&env.table, &key("gone")).await, None);
            assert_reads(&env, COMMITTED, "gone", None).await;
            return;
        }
        let _ = env.manager.rollback_transaction(&tx_id).await;
    }
    panic!("no request left a marked placeholder of a pending transaction");
}

/// Leaves `id` updated to v2 by a transaction that is committed but has not unlocked its items: the
/// coordinator dies at the first request after the record flipped to committed.
async fn committed_not_unlocked(env: &TestEnv, id: &str) -> TxId {
    for k in 1..20 {
        env.raw_put(&env.table, v1(id)).await;
        let tx = env.manager.begin();
        let tx_id = tx.id().clone();
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s(id))
            .update_expression("SET s_someattr = :s, n_other = :n")
            .expression_attribute_values(":s", s("val2"))
            .expression_attribute_values(":n", n(2))
            .send()
            .await
            .unwrap();
        env.faults.crash_at(k, FaultMode::BeforeSend);
        let res = tx.commit().await;
        env.faults.disarm();
        let state = env
            .manager
            .transaction_state(&tx_id)
            .await
            .unwrap()
            .map(|s| (s.state, s.finalized));
        let raw = env.raw_get(&env.table, &key(id)).await.unwrap();
        // (commit reports AlreadyCommitted once the record is committed but unlocking failed.)
        let _ = res;
        if matches!(state, Some((TxState::Committed, _))) && raw.contains_key("_TxA") {
            return tx_id;
        }
        // Not the step we want: settle whatever is left and try the next request.
        let _ = env.manager.complete_transaction(&tx_id).await;
        let _ = env.manager.rollback_transaction(&tx_id).await;
    }
    panic!("no request left the transaction committed but locked");
}

#[tokio::test]
async fn committed_but_locked_item_is_read_as_stored() {
    let env = TestEnv::with_settings("iso-cnu", |s| s.one_shot_max_items = 0).await;
    let id = committed_not_unlocked(&env, "a").await;
    assert_reads(&env, UNCOMMITTED, "a", Some(&v2("a"))).await;
    assert_reads(&env, COMMITTED, "a", Some(&v2("a"))).await;
    // A committed-but-locked insert is visible too.
    assert_eq!(
        env.manager.complete_transaction(&id).await.unwrap(),
        TxState::Committed
    );
    assert!(!has_tx_attrs(
        &env.raw_get(&env.table, &key("a")).await.unwrap()
    ));
}

/// A pending transaction (its record exists, state P) for fabricated lock states.
async fn pending_record(env: &TestEnv) -> Transaction {
    let tx = env.manager.begin();
    tx.update_item()
        .table_name(&env.range_table)
        .key("Id", s("anchor"))
        .key("RangeAttr", n(0))
        .update_expression("SET x = :x")
        .expression_attribute_values(":x", n(1))
        .return_values(ReturnValue::AllNew)
        .send()
        .await
        .unwrap();
    tx
}

#[tokio::test]
async fn missing_image_is_read_contention_at_committed() {
    let env = TestEnv::new("iso-noimage").await;
    let tx = pending_record(&env).await;
    let mut stored = v2("a");
    stored.insert("_TxId".into(), s(tx.id().as_str()));
    stored.insert("_TxA".into(), s("1"));
    stored.insert("_TxD".into(), n(1));
    stored.insert("_TxI".into(), s("no-such-image"));
    env.raw_put(&env.table, stored).await;
    assert_reads(&env, UNCOMMITTED, "a", Some(&v2("a"))).await;
    for projection in [false, true] {
        for got in four_reads(&env, COMMITTED, "a", projection).await {
            assert!(
                matches!(got, Err(Error::ReadContention { ref table, attempts: 4 }) if *table == env.table),
                "{got:?}"
            );
        }
    }
    // Bounded: each attempt reads the item, the owner's record and the image.
    env.counter.reset();
    let got = env
        .manager
        .get_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .send()
        .await;
    assert!(matches!(got, Err(Error::ReadContention { .. })));
    assert_eq!(env.counter.get("GetItem"), 12);
    // An applied item whose owner's record is gone is re-read, then given up on.
    let mut stored = v2("c");
    stored.insert("_TxId".into(), s("no-such-transaction"));
    stored.insert("_TxA".into(), s("1"));
    stored.insert("_TxG".into(), AttributeValue::M(v1("c")));
    env.raw_put(&env.table, stored).await;
    env.counter.reset();
    let got = env
        .manager
        .get_item()
        .table_name(&env.table)
        .key("Id", s("c"))
        .send()
        .await;
    assert!(matches!(got, Err(Error::ReadContention { .. })), "{got:?}");
    assert_eq!(env.counter.get("GetItem"), 8);
    // An applied item without any image breaks an invariant, reported as such.
    let mut stored = v2("b");
    stored.insert("_TxId".into(), s(tx.id().as_str()));
    stored.insert("_TxA".into(), s("1"));
    env.raw_put(&env.table, stored).await;
    let got = env
        .manager
        .get_item()
        .table_name(&env.table)
        .key("Id", s("b"))
        .send()
        .await;
    assert!(matches!(got, Err(Error::Invariant(_))), "{got:?}");
    tx.rollback().await.unwrap();
}

#[tokio::test]
async fn large_item_image_is_read_from_images_table() {
    let env = TestEnv::new("iso-bigimage").await;
    let big = "x".repeat(70_000);
    let mut old = v1("a");
    old.insert("blob".into(), s(&big));
    env.raw_put(&env.table, old.clone()).await;
    let tx = pending_update(&env, "a").await;
    let raw = env.raw_get(&env.table, &key("a")).await.unwrap();
    assert!(
        raw.contains_key("_TxI"),
        "image in the images table: {:?}",
        raw.keys()
    );
    let mut new = v2("a");
    new.insert("blob".into(), s(&big));
    assert_reads(&env, UNCOMMITTED, "a", Some(&new)).await;
    assert_reads(&env, COMMITTED, "a", Some(&old)).await;
    tx.rollback().await.unwrap();
    assert_reads(&env, UNCOMMITTED, "a", Some(&old)).await;
}

#[tokio::test]
async fn rolled_back_but_not_restored_serves_the_image() {
    let env = TestEnv::new("iso-rb").await;
    env.raw_put(&env.table, v1("a")).await;
    let tx = pending_update(&env, "a").await;
    let id = tx.id().clone();
    // The coordinator dies right after flipping the record to rolled back.
    env.faults.crash_at(2, FaultMode::BeforeSend);
    assert!(tx.rollback().await.is_err());
    env.faults.disarm();
    assert_eq!(
        env.manager
            .transaction_state(&id)
            .await
            .unwrap()
            .map(|s| s.state),
        Some(TxState::RolledBack)
    );
    assert!(
        env.raw_get(&env.table, &key("a"))
            .await
            .unwrap()
            .contains_key("_TxA")
    );
    assert_reads(&env, UNCOMMITTED, "a", Some(&v2("a"))).await;
    assert_reads(&env, COMMITTED, "a", Some(&v1("a"))).await;
}

/// What each read costs in requests.
#[tokio::test]
async fn request_costs() {
    let env = TestEnv::new("iso-cost").await;
    for id in ["a", "b", "c", "d"] {
        env.raw_put(&env.table, v1(id)).await;
    }
    let get = |id: &'static str, level| {
        env.manager
            .get_item()
            .table_name(&env.table)
            .key("Id", s(id))
            .isolation(level)
            .send()
    };
    // Unlocked item: one GetItem at either level (after the key schema is cached).
    get("a", COMMITTED).await.unwrap();
    for level in [UNCOMMITTED, COMMITTED] {
        env.counter.reset();
        get("a", level).await.unwrap();
        assert_eq!(env.counter.total(), 1, "{level:?}");
    }
    // Three items changed by one pending transaction.
    let tx = env.manager.begin();
    for id in ["b", "c", "d"] {
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s(id))
            .update_expression("SET n_other = :n")
            .expression_attribute_values(":n", n(9))
            .return_values(ReturnValue::AllNew)
            .send()
            .await
            .unwrap();
    }
    env.counter.reset();
    get("b", UNCOMMITTED).await.unwrap();
    assert_eq!(env.counter.total(), 1);
    env.counter.reset();
    get("b", COMMITTED).await.unwrap();
    assert_eq!(env.counter.get("GetItem"), 2, "item + owner's record");
    // A scan page: one Scan, plus one record read per transaction (not per item).
    env.counter.reset();
    let items = env
        .manager
        .scan()
        .table_name(&env.table)
        .isolation(COMMITTED)
        .send_all()
        .await
        .unwrap();
    assert_eq!(items.len(), 4);
    assert!(items.iter().all(|i| i["n_other"] == n(1)));
    assert_eq!(env.counter.get("Scan"), 1);
    assert_eq!(env.counter.get("GetItem"), 1);
    // A batch read: one BatchGetItem and one record read.
    env.counter.reset();
    let mut ka = KeysAndAttributes::builder();
    for id in ["a", "b", "c", "d"] {
        ka = ka.keys(key(id));
    }
    let out = env
        .manager
        .batch_get_item()
        .request_items(&env.table, ka.build().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(out.responses()[&env.table].len(), 4);
    assert_eq!(env.counter.get("BatchGetItem"), 1);
    assert_eq!(env.counter.get("GetItem"), 1);
    tx.rollback().await.unwrap();
}

#[tokio::test]
async fn read_lock_outside_a_transaction_is_an_error() {
    let env = TestEnv::new("iso-readlock").await;
    env.raw_put(&env.table, v1("a")).await;
    for got in four_reads(&env, IsolationLevel::ReadLock, "a", false).await {
        assert!(got.unwrap_err().is_invalid_request());
    }
}

#[tokio::test]
async fn bad_expressions_are_rejected_before_any_read() {
    let env = TestEnv::new("iso-bad").await;
    let m = &env.manager;
    let t = &env.table;
    let cases = [
        m.scan().table_name(t).projection_expression("_TxId"),
        m.scan()
            .table_name(t)
            .filter_expression("attribute_exists(_TxA)"),
        m.scan()
            .table_name(t)
            .filter_expression("#a = :v")
            .expression_attribute_names("#a", "_TxG")
            .expression_attribute_values(":v", n(1)),
        m.scan().table_name(t).filter_expression("a = :undefined"),
        m.scan()
            .table_name(t)
            .filter_expression("a = :v")
            .expression_attribute_values(":v", n(1))
            .expression_attribute_values(":unused", n(1)),
        m.scan()
            .table_name(t)
            .filter_expression("a == :v")
            .expression_attribute_values(":v", n(1)),
    ];
    env.counter.reset();
    for c in cases {
        let got = c.send().await;
        assert!(got.as_ref().unwrap_err().is_invalid_request(), "{got:?}");
    }
    let got = m.query().table_name(t).send().await;
    assert!(got.unwrap_err().is_invalid_request());
    // Only the key schema lookup may have been sent.
    assert_eq!(env.counter.get("Scan") + env.counter.get("Query"), 0);
}

/// Projections with nested paths and name placeholders are applied to images too.
#[tokio::test]
async fn nested_projection_applies_to_images() {
    let env = TestEnv::new("iso-nested").await;
    let doc = |v: i32| {
        item(&[
            ("Id", s("a")),
            (
                "doc",
                AttributeValue::M(HashMap::from([
                    ("x".to_string(), n(v)),
                    ("y".to_string(), n(v + 100)),
                    (
                        "l".to_string(),
                        AttributeValue::L(vec![n(v), n(v + 1), n(v + 2)]),
                    ),
                ])),
            ),
            ("other", s("o")),
        ])
    };
    env.raw_put(&env.table, doc(1)).await;
    let tx = env.manager.begin();
    tx.put_item()
        .table_name(&env.table)
        .set_item(Some(doc(50)))
        .return_values(ReturnValue::AllOld)
        .send()
        .await
        .unwrap();
    // A put with ALL_OLD only locks: apply it with an update returning ALL_NEW on another item.
    let tx2 = pending_update(&env, "b").await;
    tx.rollback().await.unwrap();
    // Now a real pending change of "a".
    let tx = env.manager.begin();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .update_expression("SET doc.x = :v, doc.l[1] = :v")
        .expression_attribute_values(":v", n(999))
        .return_values(ReturnValue::AllNew)
        .send()
        .await
        .unwrap();
    let expect = |x: i32, l1: i32| {
        item(&[(
            "doc",
            AttributeValue::M(HashMap::from([
                ("x".to_string(), n(x)),
                ("l".to_string(), AttributeValue::L(vec![n(l1)])),
            ])),
        )])
    };
    for (level, x, l1) in [(UNCOMMITTED, 999, 999), (COMMITTED, 1, 2)] {
        let got = env
            .manager
            .query()
            .table_name(&env.table)
            .key_condition_expression("Id = :id")
            .expression_attribute_values(":id", s("a"))
            .projection_expression("#d.x, #d.l[1]")
            .expression_attribute_names("#d", "doc")
            .isolation(level)
            .send_all()
            .await
            .unwrap();
        assert_eq!(got, vec![expect(x, l1)], "{level:?}");
        let got = env
            .manager
            .get_item()
            .table_name(&env.table)
            .key("Id", s("a"))
            .projection_expression("doc.x, doc.l[1]")
            .isolation(level)
            .send()
            .await
            .unwrap();
        assert_eq!(got.item, Some(expect(x, l1)), "{level:?}");
    }
    tx.rollback().await.unwrap();
    tx2.rollback().await.unwrap();
}

/// At `Committed`, a filter is evaluated on the version served, not on the stored item.
#[tokio::test]
async fn filters_see_the_committed_version() {
    let env = TestEnv::new("iso-filter").await;
    // a: committed 1, pending 10; b: committed 10, pending 1; c: committed 10, untouched;
    // d: pending insert 10.
    for (id, v) in [("a", 1), ("b", 10), ("c", 10)] {
        env.raw_put(&env.table, item(&[("Id", s(id)), ("v", n(v))]))
            .await;
    }
    let tx = env.manager.begin();
    for (id, v) in [("a", 10), ("b", 1), ("d", 10)] {
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s(id))
            .update_expression("SET v = :v")
            .expression_attribute_values(":v", n(v))
            .return_values(ReturnValue::AllNew)
            .send()
            .await
            .unwrap();
    }
    let ids = |items: Vec<Item>| -> BTreeSet<String> {
        items
            .iter()
            .map(|i| i["Id"].as_s().unwrap().clone())
            .collect()
    };
    for (level, want) in [(UNCOMMITTED, ["a", "c", "d"]), (COMMITTED, ["b", "c", "c"])] {
        let want: BTreeSet<String> = want.iter().map(|s| s.to_string()).collect();
        let got = env
            .manager
            .scan()
            .table_name(&env.table)
            .filter_expression("v >= :min")
            .projection_expression("Id")
            .expression_attribute_values(":min", n(5))
            .isolation(level)
            .send_all()
            .await
            .unwrap();
        assert!(got.iter().all(|i| i.len() == 1), "projection kept: {got:?}");
        assert_eq!(ids(got), want, "{level:?}");
    }
    tx.rollback().await.unwrap();
}

/// `Limit` counts stored items: pages can be short, but paging returns everything exactly once.
#[tokio::test]
async fn pagination_with_limit_skips_invisible_items() {
    let env = TestEnv::new("iso-pages").await;
    for i in 0..10 {
        env.raw_put(
            &env.range_table,
            item(&[("Id", s("p")), ("RangeAttr", n(i)), ("v", n(i))]),
        )
        .await;
    }
    let tx = env.manager.begin();
    // Pending inserts at odd ranges 11..19 and a pending update of range 0.
    for i in [11, 13, 15, 17, 19, 0] {
        tx.update_item()
            .table_name(&env.range_table)
            .key("Id", s("p"))
            .key("RangeAttr", n(i))
            .update_expression("SET v = :v")
            .expression_attribute_values(":v", n(-1))
            .return_values(ReturnValue::AllNew)
            .send()
            .await
            .unwrap();
    }
    let query = || {
        env.manager
            .query()
            .table_name(&env.range_table)
            .key_condition_expression("Id = :p")
            .expression_attribute_values(":p", s("p"))
            .limit(3)
    };
    let values = |items: &[Item]| -> Vec<i64> {
        items
            .iter()
            .map(|i| i["v"].as_n().unwrap().parse().unwrap())
            .collect()
    };
    let all = query().isolation(COMMITTED).send_all().await.unwrap();
    assert_eq!(values(&all), (0..10).collect::<Vec<_>>());
    let all = query().isolation(UNCOMMITTED).send_all().await.unwrap();
    assert_eq!(values(&all).len(), 15);
    assert_eq!(values(&all)[0], -1);
    // Page by page, descending.
    let pages: Vec<_> = query()
        .scan_index_forward(false)
        .isolation(COMMITTED)
        .into_pages()
        .try_collect()
        .await
        .unwrap();
    assert!(pages.len() >= 5, "{} pages", pages.len());
    assert!(
        pages.iter().any(|p| p.items().len() < 3),
        "some page is short"
    );
    let flat: Vec<Item> = pages.iter().flat_map(|p| p.items().to_vec()).collect();
    assert_eq!(values(&flat), (0..10).rev().collect::<Vec<_>>());
    // Resuming from a page's last key.
    let first = query().isolation(COMMITTED).send().await.unwrap();
    let rest = query()
        .set_exclusive_start_key(first.last_evaluated_key.clone())
        .isolation(COMMITTED)
        .send_all()
        .await
        .unwrap();
    assert_eq!(first.items.len() + rest.len(), 10);
    // A parallel scan covers every item once.
    let mut seen = Vec::new();
    for seg in 0..3 {
        let part = env
            .manager
            .scan()
            .table_name(&env.range_table)
            .segment(seg)
            .total_segments(3)
            .filter_expression("Id = :p")
            .expression_attribute_values(":p", s("p"))
            .isolation(COMMITTED)
            .send_all()
            .await
            .unwrap();
        seen.extend(values(&part));
    }
    seen.sort();
    assert_eq!(seen, (0..10).collect::<Vec<_>>());
    tx.rollback().await.unwrap();
}

/// A table with hash `Id`, a global index `all` (status, at) projecting everything and a global
/// index `keys` on the same keys projecting keys only.
async fn gsi_table(env: &TestEnv) -> String {
    let name = unique_name("iso-gsi");
    env.guard.add(&name);
    let ks = |h: &str, r: &str| {
        vec![
            KeySchemaElement::builder()
                .attribute_name(h)
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
            KeySchemaElement::builder()
                .attribute_name(r)
                .key_type(KeyType::Range)
                .build()
                .unwrap(),
        ]
    };
    let def = |a: &str, t: ScalarAttributeType| {
        AttributeDefinition::builder()
            .attribute_name(a)
            .attribute_type(t)
            .build()
            .unwrap()
    };
    let gsi = |name: &str, p: ProjectionType| {
        GlobalSecondaryIndex::builder()
            .index_name(name)
            .set_key_schema(Some(ks("status", "at")))
            .projection(Projection::builder().projection_type(p).build())
            .build()
            .unwrap()
    };
    env.client
        .create_table()
        .table_name(&name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(def("Id", ScalarAttributeType::S))
        .attribute_definitions(def("status", ScalarAttributeType::S))
        .attribute_definitions(def("at", ScalarAttributeType::N))
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("Id")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .global_secondary_indexes(gsi("all", ProjectionType::All))
        .global_secondary_indexes(gsi("keys", ProjectionType::KeysOnly))
        .send()
        .await
        .unwrap();
    name
}

#[tokio::test]
async fn global_index_reads_resolve_against_the_committed_version() {
    let env = TestEnv::new("iso-gsi").await;
    let t = gsi_table(&env).await;
    for (id, status, at, v) in [
        ("a", "open", 1, 1),
        ("b", "open", 2, 2),
        ("c", "closed", 3, 3),
    ] {
        env.raw_put(
            &t,
            item(&[
                ("Id", s(id)),
                ("status", s(status)),
                ("at", n(at)),
                ("v", n(v)),
            ]),
        )
        .await;
    }
    // Pending: a leaves "open", c joins "open", d is inserted as "open", b's value changes.
    let tx = env.manager.begin();
    for (id, update) in [
        ("a", "SET #st = :closed"),
        ("c", "SET #st = :open"),
        ("d", "SET #st = :open, #at = :four, v = :four"),
        ("b", "SET v = :big"),
    ] {
        let mut u = tx
            .update_item()
            .table_name(&t)
            .key("Id", s(id))
            .update_expression(update)
            .return_values(ReturnValue::AllNew);
        if id != "b" {
            u = u.expression_attribute_names("#st", "status");
        }
        u = match id {
            "a" => u.expression_attribute_values(":closed", s("closed")),
            "c" => u.expression_attribute_values(":open", s("open")),
            "d" => u
                .expression_attribute_names("#at", "at")
                .expression_attribute_values(":open", s("open"))
                .expression_attribute_values(":four", n(4)),
            _ => u.expression_attribute_values(":big", n(200)),
        };
        u.send().await.unwrap();
    }
    let open = |index: &'static str, level: IsolationLevel| {
        env.manager
            .query()
            .table_name(&t)
            .index_name(index)
            .key_condition_expression("#st = :open")
            .expression_attribute_names("#st", "status")
            .expression_attribute_values(":open", s("open"))
            .isolation(level)
    };
    let ids = |items: &[Item]| -> Vec<String> {
        items
            .iter()
            .map(|i| i["Id"].as_s().unwrap().clone())
            .collect()
    };
    // Uncommitted: what the index holds.
    let got = open("all", UNCOMMITTED).send_all().await.unwrap();
    assert_eq!(ids(&got), ["b", "c", "d"]);
    let got = open("keys", UNCOMMITTED).send_all().await.unwrap();
    assert_eq!(ids(&got), ["b", "c", "d"]);
    assert!(got.iter().all(|i| i.len() == 3), "keys only: {got:?}");
    // Committed: c's committed version is not "open" and d does not exist; b is served from its
    // image. (a, whose committed version is "open", has left the index: no phantom protection.)
    for index in ["all", "keys"] {
        let got = open(index, COMMITTED).send_all().await.unwrap();
        assert_eq!(ids(&got), ["b"], "{index}");
        let b = &got[0];
        assert!(!has_tx_attrs(b));
        if index == "all" {
            assert_eq!(b["v"], n(2));
        } else {
            assert_eq!(b.len(), 3, "keys only: {b:?}");
        }
    }
    // A filter on the index at Committed sees b's committed value.
    let got = open("all", COMMITTED)
        .filter_expression("v < :x")
        .expression_attribute_values(":x", n(100))
        .send_all()
        .await
        .unwrap();
    assert_eq!(ids(&got), ["b"]);
    let got = open("all", UNCOMMITTED)
        .filter_expression("v < :x")
        .expression_attribute_values(":x", n(100))
        .send_all()
        .await
        .unwrap();
    assert_eq!(ids(&got), ["c", "d"]);
    // Scans of the index.
    for index in ["all", "keys"] {
        let got = env
            .manager
            .scan()
            .table_name(&t)
            .index_name(index)
            .isolation(COMMITTED)
            .send_all()
            .await
            .unwrap();
        let mut got = ids(&got);
        got.sort();
        // a's index entry is "closed" now but its committed version is "open": still in the index.
        assert_eq!(got, ["a", "b", "c"], "{index}");
    }
    tx.commit().await.unwrap();
    for index in ["all", "keys"] {
        let got = open(index, COMMITTED).send_all().await.unwrap();
        assert_eq!(ids(&got), ["b", "c", "d"], "{index} after commit");
    }
}

/// The library's own evaluation of filters on before-images agrees with DynamoDB's evaluation of the
/// same filters on the same items.
#[tokio::test]
async fn filters_on_images_agree_with_dynamodb() {
    let env = TestEnv::new("iso-eval").await;
    let images = unique_name("iso-eval-img");
    env.guard.add(&images);
    create_table(&env.client, &images, ("Id", ScalarAttributeType::S), None).await;
    let tx = pending_record(&env).await;
    let l = |v: Vec<AttributeValue>| AttributeValue::L(v);
    let m = |v: Vec<(&str, AttributeValue)>| {
        AttributeValue::M(v.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
    };
    let b = |v: &[u8]| AttributeValue::B(Blob::new(v.to_vec()));
    let ss = |v: &[&str]| AttributeValue::Ss(v.iter().map(|s| s.to_string()).collect());
    let ns = |v: &[&str]| AttributeValue::Ns(v.iter().map(|s| s.to_string()).collect());
    let items: Vec<Vec<(&str, AttributeValue)>> = vec![
        vec![("a", n(1)), ("s", s("abc")), ("ss", ss(&["x", "abc"]))],
        vec![("a", n("5.00")), ("s", s("ab")), ("ns", ns(&["1", "5"]))],
        vec![
            ("a", n(10)),
            ("s", s("héllo")),
            ("l", l(vec![n(1), s("ab")])),
        ],
        vec![
            ("a", n(-3)),
            ("s", s("b")),
            ("m", m(vec![("x", n(1)), ("y", s("ab"))])),
        ],
        vec![
            ("a", n("1e2")),
            ("bin", b(b"\x01\x02\x03")),
            ("bo", AttributeValue::Bool(true)),
        ],
        vec![
            ("a", s("5")),
            ("nu", AttributeValue::Null(true)),
            ("l", l(vec![])),
        ],
        vec![("s", s("")), ("m", m(vec![])), ("ss", ss(&["ab"]))],
        vec![
            ("a", n("0.0001")),
            ("s", s("zzz")),
            ("ns", ns(&["5.0", "-1"])),
        ],
        vec![
            ("l", l(vec![n(5), l(vec![s("deep")])])),
            ("bin", b(b"\x01")),
        ],
        vec![],
    ];
    for (i, attrs) in items.iter().enumerate() {
        let id = format!("i{i}");
        let mut it = item(&[("Id", s(&id))]);
        it.extend(attrs.iter().map(|(k, v)| (k.to_string(), v.clone())));
        env.raw_put(&env.table, it.clone()).await;
        // The same item as the before-image of a pending change: stored is something else.
        let locked = item(&[
            ("Id", s(&id)),
            ("junk", s("stored")),
            ("_TxId", s(tx.id().as_str())),
            ("_TxA", s("1")),
            ("_TxD", n(1)),
            ("_TxG", AttributeValue::M(it)),
        ]);
        env.raw_put(&images, locked).await;
    }
    let values: HashMap<String, AttributeValue> = [
        (":n1", n(1)),
        (":n2", n(2)),
        (":n3", n(3)),
        (":n5", n(5)),
        (":n10", n("10.0")),
        (":big", n("99.5")),
        (":s", s("ab")),
        (":pre", s("a")),
        (":sub", s("b")),
        (":tN", s("N")),
        (":tS", s("S")),
        (":tL", s("L")),
        (":b", b(b"\x01")),
        (":t", AttributeValue::Bool(true)),
        (":null", AttributeValue::Null(true)),
        (":ss", ss(&["abc", "x"])),
        (":ns", ns(&["5", "1.0"])),
        (":deep", s("deep")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let filters = [
        "a = :n5",
        "a <> :n5",
        "a < :n5",
        "a <= :n5",
        "a > :n1",
        "a >= :n10",
        "a BETWEEN :n1 AND :n5",
        "a BETWEEN :n1 AND :big",
        "a IN (:n1, :n5, :s)",
        "s < :s",
        "s >= :s",
        "s <> :s",
        "begins_with(s, :pre)",
        "begins_with(bin, :b)",
        "contains(s, :sub)",
        "contains(ss, :s)",
        "contains(ns, :n5)",
        "contains(l, :n1)",
        "contains(l, :s)",
        "size(s) > :n3",
        "size(s) = :n5",
        "size(l) = :n2",
        "size(m) >= :n1",
        "size(bin) < :n2",
        "size(ss) = :n1",
        "attribute_type(a, :tN)",
        "attribute_type(a, :tS)",
        "attribute_type(l, :tL)",
        "attribute_exists(m.x)",
        "attribute_not_exists(a)",
        "attribute_exists(l[1][0])",
        "l[1][0] = :deep",
        "NOT a = :n5",
        "NOT (a < :n5 OR s = :s)",
        "m.x = :n1 OR l[1] = :s",
        "m.y = :s AND a < :n1",
        "bin = :b",
        "bo = :t",
        "nu = :null",
        "ss = :ss",
        "ns = :ns",
        "a = :big OR (a > :n1 AND NOT (a > :n10))",
        "size(s) <> :n2",
        "nope <> :n1",
        "NOT nope = :n1",
        "NOT begins_with(s, :pre)",
        "#A > :n2 and attribute_exists(#S)",
    ];
    let names = HashMap::from([
        ("#A".to_string(), "a".to_string()),
        ("#S".to_string(), "s".to_string()),
    ]);
    let mut failures = Vec::new();
    for f in filters {
        let (n_used, v_used): (Vec<_>, Vec<_>) = (
            names
                .iter()
                .filter(|(k, _)| f.contains(k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            values
                .iter()
                .filter(|(k, _)| {
                    f.split(|c: char| !(c.is_alphanumeric() || c == ':' || c == '_'))
                        .any(|w| w == k.as_str())
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        );
        let n_used: Option<HashMap<_, _>> =
            (!n_used.is_empty()).then(|| n_used.into_iter().collect());
        let v_used: Option<HashMap<_, _>> =
            (!v_used.is_empty()).then(|| v_used.into_iter().collect());
        let server = env
            .client
            .scan()
            .table_name(&env.table)
            .filter_expression(f)
            .set_expression_attribute_names(n_used.clone())
            .set_expression_attribute_values(v_used.clone())
            .consistent_read(true)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{f}: {e:?}"));
        let server: BTreeSet<String> = server
            .items()
            .iter()
            .map(|i| i["Id"].as_s().unwrap().clone())
            .collect();
        let ours: BTreeSet<String> = env
            .manager
            .scan()
            .table_name(&images)
            .filter_expression(f)
            .set_expression_attribute_names(n_used)
            .set_expression_attribute_values(v_used)
            .isolation(COMMITTED)
            .send_all()
            .await
            .unwrap_or_else(|e| panic!("{f}: {e}"))
            .iter()
            .map(|i| i["Id"].as_s().unwrap().clone())
            .collect();
        if server != ours {
            failures.push(format!("{f}: DynamoDB {server:?}, library {ours:?}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    tx.rollback().await.unwrap();
}

/// Writers set tags (their transaction id) on items and roll back half of their transactions on
/// purpose; readers at `Committed` read all the while and must never see the tag of a transaction
/// that rolled back or had not started committing by the end of the read.
#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn committed_readers_never_see_uncommitted_tags() {
    const ITEMS: usize = 6;
    const WRITERS: usize = 4;
    const TXS: usize = 20;
    const READERS: usize = 4;
    let env = Arc::new(TestEnv::new("iso-race").await);
    let ids: Vec<String> = (0..ITEMS).map(|i| format!("k{i}")).collect();
    for id in &ids {
        env.raw_put(&env.table, item(&[("Id", s(id)), ("tag", s("init"))]))
            .await;
    }
    let commit_started: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let committed: Arc<Mutex<HashSet<String>>> = Arc::default();
    let rolled_back: Arc<Mutex<HashSet<String>>> = Arc::default();
    let done = Arc::new(AtomicBool::new(false));

    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let env = env.clone();
        let ids = ids.clone();
        let (commit_started, committed, rolled_back) = (
            commit_started.clone(),
            committed.clone(),
            rolled_back.clone(),
        );
        writers.push(tokio::spawn(async move {
            for t in 0..TXS {
                let tx = env.manager.begin();
                let tag = tx.id().as_str().to_string();
                let targets = [
                    ids[(w + t) % ITEMS].clone(),
                    ids[(w * 3 + 2 * t + 1) % ITEMS].clone(),
                ];
                let mut ok = true;
                for id in targets.iter().collect::<BTreeSet<_>>() {
                    let r = tx
                        .update_item()
                        .table_name(&env.table)
                        .key("Id", s(id))
                        .update_expression("SET tag = :t")
                        .expression_attribute_values(":t", s(&tag))
                        .return_values(ReturnValue::AllNew)
                        .send()
                        .await;
                    if r.is_err() {
                        ok = false;
                        break;
                    }
                }
                // Leave the applied, uncommitted state visible for a moment.
                tokio::time::sleep(Duration::from_millis(3)).await;
                let id = TxId::from(tag.as_str());
                if ok && t % 2 == 0 {
                    commit_started
                        .lock()
                        .unwrap()
                        .insert(tag.clone(), Instant::now());
                    let _ = tx.commit().await;
                } else {
                    let _ = tx.rollback().await;
                }
                // The outcome, as recorded (a competitor may have rolled it back).
                match env
                    .manager
                    .transaction_state(&id)
                    .await
                    .unwrap()
                    .map(|s| (s.state, s.finalized))
                {
                    Some((TxState::Committed, _)) => committed.lock().unwrap().insert(tag),
                    Some((TxState::RolledBack, _)) => rolled_back.lock().unwrap().insert(tag),
                    other => panic!("transaction {id} left {other:?}"),
                };
            }
        }));
    }

    let mut readers = Vec::new();
    for r in 0..READERS {
        let env = env.clone();
        let ids = ids.clone();
        let (commit_started, done) = (commit_started.clone(), done.clone());
        readers.push(tokio::spawn(async move {
            let mut seen: HashSet<String> = HashSet::new();
            let mut reads = 0u32;
            let mut round = r;
            while !done.load(Ordering::SeqCst) || reads < 8 {
                round += 1;
                let m = &env.manager;
                let items: Vec<Item> = match round % 4 {
                    0 => {
                        let mut v = Vec::new();
                        for id in &ids {
                            v.extend(
                                m.get_item()
                                    .table_name(&env.table)
                                    .key("Id", s(id))
                                    .consistent_read(true)
                                    .send()
                                    .await
                                    .unwrap()
                                    .item,
                            );
                        }
                        v
                    }
                    1 => m
                        .scan()
                        .table_name(&env.table)
                        .projection_expression("tag")
                        .consistent_read(true)
                        .send_all()
                        .await
                        .unwrap(),
                    2 => {
                        let id = &ids[round % ITEMS];
                        m.query()
                            .table_name(&env.table)
                            .key_condition_expression("Id = :id")
                            .filter_expression("attribute_exists(tag)")
                            .expression_attribute_values(":id", s(id))
                            .consistent_read(true)
                            .send_all()
                            .await
                            .unwrap()
                    }
                    _ => {
                        let mut ka = KeysAndAttributes::builder().consistent_read(true);
                        for id in &ids {
                            ka = ka.keys(key(id));
                        }
                        m.batch_get_item()
                            .request_items(&env.table, ka.build().unwrap())
                            .send()
                            .await
                            .unwrap()
                            .responses
                            .remove(&env.table)
                            .unwrap()
                    }
                };
                let end = Instant::now();
                reads += 1;
                assert!(!items.is_empty(), "reader {r}: items vanished");
                for i in items {
                    assert!(!has_tx_attrs(&i));
                    let tag = i["tag"].as_s().unwrap().clone();
                    if tag != "init" {
                        let started = commit_started.lock().unwrap().get(&tag).copied();
                        assert!(
                            started.is_some_and(|t| t <= end),
                            "reader {r} saw tag {tag} of a transaction that had not committed"
                        );
                    }
                    seen.insert(tag);
                }
            }
            (seen, reads)
        }));
    }
    for w in writers {
        w.await.unwrap();
    }
    done.store(true, Ordering::SeqCst);
    let mut all_seen = HashSet::new();
    for r in readers {
        let (seen, reads) = r.await.unwrap();
        assert!(reads >= 8);
        all_seen.extend(seen);
    }
    let committed = committed.lock().unwrap().clone();
    let rolled_back = rolled_back.lock().unwrap().clone();
    assert!(committed.len() >= 5, "{} committed", committed.len());
    assert!(
        rolled_back.len() >= WRITERS * TXS / 2,
        "{} rolled back",
        rolled_back.len()
    );
    assert!(all_seen.len() > 1, "readers saw no committed write");
    for tag in &all_seen {
        assert!(
            tag == "init" || committed.contains(tag),
            "a reader saw tag {tag}, whose transaction did not commit"
        );
    }
    // Everything settled: both levels agree, and every tag is a committed one.
    let c = env
        .manager
        .scan()
        .table_name(&env.table)
        .isolation(COMMITTED)
        .send_all()
        .await
        .unwrap();
    let u = env
        .manager
        .scan()
        .table_name(&env.table)
        .isolation(UNCOMMITTED)
        .send_all()
        .await
        .unwrap();
    let tags = |v: &[Item]| -> BTreeSet<(String, String)> {
        v.iter()
            .map(|i| {
                (
                    i["Id"].as_s().unwrap().clone(),
                    i["tag"].as_s().unwrap().clone(),
                )
            })
            .collect()
    };
    assert_eq!(tags(&c), tags(&u));
    for (_, tag) in tags(&c) {
        assert!(tag == "init" || committed.contains(&tag));
    }
}

/// A local index projecting keys only: read directly (DynamoDB fetches the lock attributes from the
/// table), results trimmed to the index's projection, images checked against the key condition.
#[tokio::test]
async fn local_index_reads() {
    use aws_sdk_dynamodb::types::LocalSecondaryIndex;
    let env = TestEnv::new("iso-lsi").await;
    let t = unique_name("iso-lsi");
    env.guard.add(&t);
    let el = |a: &str, k: KeyType| {
        KeySchemaElement::builder()
            .attribute_name(a)
            .key_type(k)
            .build()
            .unwrap()
    };
    let def = |a: &str, ty: ScalarAttributeType| {
        AttributeDefinition::builder()
            .attribute_name(a)
            .attribute_type(ty)
            .build()
            .unwrap()
    };
    env.client
        .create_table()
        .table_name(&t)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(def("Id", ScalarAttributeType::S))
        .attribute_definitions(def("r", ScalarAttributeType::N))
        .attribute_definitions(def("v", ScalarAttributeType::N))
        .key_schema(el("Id", KeyType::Hash))
        .key_schema(el("r", KeyType::Range))
        .local_secondary_indexes(
            LocalSecondaryIndex::builder()
                .index_name("by_v")
                .key_schema(el("Id", KeyType::Hash))
                .key_schema(el("v", KeyType::Range))
                .projection(
                    Projection::builder()
                        .projection_type(ProjectionType::KeysOnly)
                        .build(),
                )
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    for (r, v) in [(1, 3), (2, 10), (3, 20)] {
        env.raw_put(
            &t,
            item(&[("Id", s("p")), ("r", n(r)), ("v", n(v)), ("extra", s("x"))]),
        )
        .await;
    }
    // Pending: r=1 moves into the range (3 -> 30), r=3 changes within it (20 -> 25).
    let tx = env.manager.begin();
    for (r, v) in [(1, 30), (3, 25)] {
        tx.update_item()
            .table_name(&t)
            .key("Id", s("p"))
            .key("r", n(r))
            .update_expression("SET v = :v")
            .expression_attribute_values(":v", n(v))
            .return_values(ReturnValue::AllNew)
            .send()
            .await
            .unwrap();
    }
    let q = |level| {
        env.manager
            .query()
            .table_name(&t)
            .index_name("by_v")
            .key_condition_expression("Id = :p AND v > :min")
            .expression_attribute_values(":p", s("p"))
            .expression_attribute_values(":min", n(5))
            .isolation(level)
    };
    let rv = |items: &[Item]| -> Vec<(String, String)> {
        items
            .iter()
            .map(|i| {
                assert_eq!(i.len(), 3, "keys only: {i:?}");
                (
                    i["r"].as_n().unwrap().clone(),
                    i["v"].as_n().unwrap().clone(),
                )
            })
            .collect()
    };
    let got = q(UNCOMMITTED).send_all().await.unwrap();
    assert_eq!(
        rv(&got),
        [("2", "10"), ("3", "25"), ("1", "30")].map(|(a, b)| (a.to_string(), b.to_string()))
    );
    let got = q(COMMITTED).send_all().await.unwrap();
    assert_eq!(
        rv(&got),
        [("2", "10"), ("3", "20")].map(|(a, b)| (a.to_string(), b.to_string()))
    );
    // With a projection of an attribute the index does not hold: fetched from the table.
    let got = q(COMMITTED)
        .projection_expression("r, extra")
        .send_all()
        .await
        .unwrap();
    assert_eq!(got.len(), 2);
    assert!(
        got.iter().all(|i| i.len() == 2 && i["extra"] == s("x")),
        "{got:?}"
    );
    tx.rollback().await.unwrap();
}
