//! Security through the library's own API, against items that really are locked:
//!
//! - a caller cannot forge a lock (write `_Tx*` attributes), clear one (remove or overwrite them,
//!   directly or through `#name` placeholders, nested paths or update operands) or read through one
//!   (project, filter, condition on or copy `_Tx*` attributes, among them the before-image `_TxG`),
//!   on any write or read path, in or out of a transaction: every such request is an
//!   `InvalidRequest` before anything is sent, and the lock is intact afterwards;
//! - no result carries `_Tx*` attributes while the item is read-locked, applied but uncommitted, or
//!   committed: isolated reads at both levels (get, batch get, query, scan, streams, typed),
//!   `Transaction::get_item`, every `ReturnValues`, and `Error::ConditionFailed::item`;
//! - a finished transaction, resumed by id, accepts no new request and writes nothing.
//!
//! `tests/isolation.rs` checks the isolated reads' contents in every lock state and
//! `tests/transaction.rs` the validation of unlocked requests; this file covers what they do not.
mod common;

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{KeysAndAttributes, ReturnValue};
use common::*;
use dynamodb_transactions::{Error, IsolationLevel, Item, Transaction, TxState};
use futures::TryStreamExt;

const LEVELS: [IsolationLevel; 2] = [IsolationLevel::Uncommitted, IsolationLevel::Committed];

/// Every lock attribute the protocol writes, and one it does not (the whole prefix is reserved).
const LOCK_NAMES: [&str; 7] = ["_TxId", "_TxD", "_TxT", "_TxA", "_TxG", "_TxI", "_TxNew"];

fn original(id: &str) -> Item {
    item(&[("Id", s(id)), ("v", n(1)), ("secret", s("before"))])
}

fn updated(id: &str) -> Item {
    item(&[("Id", s(id)), ("v", n(2)), ("secret", s("after"))])
}

/// `owner` updates `id` from `original` to `updated` and applies it at once (ReturnValues ALL_NEW):
/// the stored item carries the owner's lock and the before-image `_TxG`.
async fn apply_update(env: &TestEnv, owner: &Transaction, id: &str) {
    let got = owner
        .update_item()
        .table_name(&env.table)
        .key("Id", s(id))
        .update_expression("SET v = :v, secret = :s")
        .expression_attribute_values(":v", n(2))
        .expression_attribute_values(":s", s("after"))
        .return_values(ReturnValue::AllNew)
        .send()
        .await
        .unwrap();
    assert_eq!(got.attributes, Some(updated(id)));
    let raw = env.raw_get(&env.table, &key(id)).await.unwrap();
    assert_eq!(raw.get("_TxId"), Some(&s(owner.id().as_str())), "{raw:?}");
    assert!(
        raw.contains_key("_TxA") && raw.contains_key("_TxG"),
        "{raw:?}"
    );
}

/// Expects `InvalidRequest` for a reserved `_Tx` name, naming the case on failure.
fn expect_invalid<T: std::fmt::Debug>(case: &str, got: Result<T, Error>) {
    expect_invalid_because(case, "_Tx", got)
}

/// Expects `InvalidRequest` whose reason mentions `needle` (so it was rejected for the reason
/// under test, not for another mistake in the request).
fn expect_invalid_because<T: std::fmt::Debug>(case: &str, needle: &str, got: Result<T, Error>) {
    match got {
        Err(Error::InvalidRequest { reason }) if reason.contains(needle) => {}
        other => panic!("{case}: expected InvalidRequest mentioning {needle}, got {other:?}"),
    }
}

#[tokio::test]
async fn callers_cannot_forge_clear_or_read_through_a_lock() {
    let env = TestEnv::new("sec-lock").await;
    let t = env.table.clone();
    for id in ["a", "b", "free"] {
        env.raw_put(&t, original(id)).await;
    }
    // `a`: applied but uncommitted (before-image in `_TxG`); `b`: read-locked; `free`: no lock.
    let owner = env.manager.begin();
    apply_update(&env, &owner, "a").await;
    owner
        .get_item()
        .table_name(&t)
        .key("Id", s("b"))
        .send()
        .await
        .unwrap();
    let owner_id = s(owner.id().as_str());
    let mut before = HashMap::new();
    for id in ["a", "b", "free"] {
        before.insert(id, env.raw_get(&t, &key(id)).await.unwrap());
    }
    assert!(has_tx_attrs(&before["b"]) && !has_tx_attrs(&before["free"]));

    // Requests come from another transaction of the same manager and from a second coordinator.
    let (other_manager, _) = env.second_coordinator();
    let attackers = [env.manager.begin(), other_manager.begin()];
    let sent_before = env.counter.snapshot();
    let mut cases = 0;
    for tx in &attackers {
        for id in ["a", "b", "free"] {
            // Forge: write lock attributes, claiming the owner's lock or one of one's own.
            for name in LOCK_NAMES {
                for value in [owner_id.clone(), s(tx.id().as_str()), n(1)] {
                    let mut it = original(id);
                    it.insert(name.to_string(), value.clone());
                    expect_invalid(
                        &format!("put {id} with {name}"),
                        tx.put_item()
                            .table_name(&t)
                            .set_item(Some(it.clone()))
                            .return_values(ReturnValue::AllOld)
                            .send()
                            .await,
                    );
                    expect_invalid(
                        &format!("typed put {id} with {name}"),
                        tx.put(&t, &it_as_json(&it)).await,
                    );
                    cases += 2;
                }
                // Forge or clear with updates: direct, through a name placeholder, through a
                // reserved value placeholder, nested below the attribute.
                let updates: [(&str, Option<(&str, &str)>); 6] = [
                    ("SET #n = :v", Some(("#n", name))),
                    ("REMOVE #n", Some(("#n", name))),
                    ("SET #n.x = :v", Some(("#n", name))),
                    ("SET v = :v REMOVE #m[0]", Some(("#m", name))),
                    ("SET x = :v REMOVE #n.secret", Some(("#n", name))),
                    ("SET v = :v, #_TxX = :v", Some(("#_TxX", "v2"))),
                ];
                for (expr, names) in updates {
                    let mut u = tx
                        .update_item()
                        .table_name(&t)
                        .key("Id", s(id))
                        .update_expression(expr);
                    if expr.contains(":v") {
                        u = u.expression_attribute_values(":v", owner_id.clone());
                    }
                    if let Some((k, v)) = names {
                        u = u.expression_attribute_names(k, v);
                    }
                    expect_invalid(&format!("update {id}: {expr} ({name})"), u.send().await);
                    cases += 1;
                }
                for expr in [
                    format!("SET {name} = :v"),
                    format!("REMOVE {name}"),
                    format!("SET v = :v REMOVE {name}"),
                    format!("SET {name}.v = :v"),
                ] {
                    let mut u = tx
                        .update_item()
                        .table_name(&t)
                        .key("Id", s(id))
                        .update_expression(&expr);
                    if expr.contains(":v") {
                        u = u.expression_attribute_values(":v", n(3));
                    }
                    expect_invalid(&format!("update {id}: {expr}"), u.send().await);
                    cases += 1;
                }
            }
            expect_invalid(
                "reserved value placeholder",
                tx.update_item()
                    .table_name(&t)
                    .key("Id", s(id))
                    .update_expression("SET v = :_TxV")
                    .expression_attribute_values(":_TxV", n(3))
                    .send()
                    .await,
            );
            // Read through with update operands: copy the before-image or the owner into the item.
            for (expr, names) in [
                ("SET stolen = _TxG", None),
                ("SET stolen = _TxG.secret", None),
                ("SET stolen = #g.secret", Some(("#g", "_TxG"))),
                ("SET stolen = if_not_exists(_TxId, :v)", None),
                ("ADD #a :one", Some(("#a", "_TxA"))),
            ] {
                let mut u = tx
                    .update_item()
                    .table_name(&t)
                    .key("Id", s(id))
                    .update_expression(expr);
                u = match expr {
                    e if e.contains(":one") => u.expression_attribute_values(":one", n(1)),
                    e if e.contains(":v") => u.expression_attribute_values(":v", n(1)),
                    _ => u,
                };
                if let Some((k, v)) = names {
                    u = u.expression_attribute_names(k, v);
                }
                expect_invalid(&format!("update {id}: {expr}"), u.send().await);
            }
            // Read through with conditions: learn who holds the lock, or whether it is applied.
            for (cond, names) in [
                ("_TxId = :v", None),
                ("attribute_exists(_TxA)", None),
                ("#o = :v", Some(("#o", "_TxId"))),
                ("v = :v OR size(#g) > :v", Some(("#g", "_TxG"))),
                ("contains(_TxG.secret, :v)", None),
            ] {
                let vals = cond.contains(":v");
                let mut d = tx.delete_item().table_name(&t).key("Id", s(id));
                let mut p = tx.put_item().table_name(&t).set_item(Some(original(id)));
                let mut u = tx
                    .update_item()
                    .table_name(&t)
                    .key("Id", s(id))
                    .update_expression("SET x = :x")
                    .expression_attribute_values(":x", n(1));
                d = d.condition_expression(cond);
                p = p.condition_expression(cond);
                u = u.condition_expression(cond);
                if vals {
                    d = d.expression_attribute_values(":v", owner_id.clone());
                    p = p.expression_attribute_values(":v", owner_id.clone());
                    u = u.expression_attribute_values(":v", owner_id.clone());
                }
                if let Some((k, v)) = names {
                    d = d.expression_attribute_names(k, v);
                    p = p.expression_attribute_names(k, v);
                    u = u.expression_attribute_names(k, v);
                }
                expect_invalid(&format!("delete {id} if {cond}"), d.send().await);
                expect_invalid(&format!("put {id} if {cond}"), p.send().await);
                expect_invalid(&format!("update {id} if {cond}"), u.send().await);
                cases += 3;
            }
            // Read through with a transactional read's projection or key.
            for (proj, names) in [
                ("_TxG", None),
                ("v, _TxId", None),
                ("_TxG.secret", None),
                ("#g", Some(("#g", "_TxG"))),
                ("Id, #g.secret", Some(("#g", "_TxG"))),
            ] {
                let mut g = tx
                    .get_item()
                    .table_name(&t)
                    .key("Id", s(id))
                    .projection_expression(proj);
                if let Some((k, v)) = names {
                    g = g.expression_attribute_names(k, v);
                }
                expect_invalid(&format!("tx get {id} projecting {proj}"), g.send().await);
                cases += 1;
            }
            let mut k = key(id);
            k.insert("_TxId".into(), owner_id.clone());
            expect_invalid(
                "tx get with a lock attribute in the key",
                tx.get_item().table_name(&t).set_key(Some(k)).send().await,
            );
        }
    }
    // Read through outside transactions, at every level and on every read path.
    let m = &env.manager;
    for level in LEVELS {
        for (proj, names) in [
            ("_TxG", None),
            ("Id, _TxG.secret", None),
            ("#g", Some(("#g", "_TxG"))),
            ("Id, #i", Some(("#i", "_TxId"))),
        ] {
            let names: Option<HashMap<String, String>> =
                names.map(|(k, v)| HashMap::from([(k.to_string(), v.to_string())]));
            let what = format!("{proj} at {level:?}");
            expect_invalid(
                &format!("get projecting {what}"),
                m.get_item()
                    .table_name(&t)
                    .key("Id", s("a"))
                    .projection_expression(proj)
                    .set_expression_attribute_names(names.clone())
                    .isolation(level)
                    .send()
                    .await,
            );
            let ka = KeysAndAttributes::builder()
                .keys(key("a"))
                .projection_expression(proj)
                .set_expression_attribute_names(names.clone())
                .build()
                .unwrap();
            expect_invalid(
                &format!("batch get projecting {what}"),
                m.batch_get_item()
                    .request_items(&t, ka)
                    .isolation(level)
                    .send()
                    .await,
            );
            expect_invalid(
                &format!("query projecting {what}"),
                m.query()
                    .table_name(&t)
                    .key_condition_expression("Id = :id")
                    .expression_attribute_values(":id", s("a"))
                    .projection_expression(proj)
                    .set_expression_attribute_names(names.clone())
                    .isolation(level)
                    .send_all()
                    .await,
            );
            expect_invalid(
                &format!("scan projecting {what}"),
                m.scan()
                    .table_name(&t)
                    .projection_expression(proj)
                    .set_expression_attribute_names(names)
                    .isolation(level)
                    .send_all()
                    .await,
            );
            cases += 4;
        }
        // Filters that would tell locked items (or their owner) from others.
        for (filter, names) in [
            ("attribute_exists(_TxId)", None),
            ("#a = :v", Some(("#a", "_TxA"))),
            ("v = :v OR _TxG.v = :v", None),
        ] {
            let mut q = m
                .query()
                .table_name(&t)
                .key_condition_expression("Id = :id")
                .expression_attribute_values(":id", s("a"))
                .filter_expression(filter)
                .isolation(level);
            let mut sc = m.scan().table_name(&t).filter_expression(filter);
            if filter.contains(":v") {
                q = q.expression_attribute_values(":v", n(1));
                sc = sc.expression_attribute_values(":v", n(1));
            }
            if let Some((k, v)) = names {
                q = q.expression_attribute_names(k, v);
                sc = sc.expression_attribute_names(k, v);
            }
            expect_invalid(&format!("query filter {filter}"), q.send().await);
            expect_invalid(
                &format!("scan filter {filter}"),
                sc.isolation(level).send().await,
            );
            cases += 2;
        }
        expect_invalid(
            "query key condition on a lock attribute",
            m.query()
                .table_name(&t)
                .key_condition_expression("Id = :id AND _TxA = :v")
                .expression_attribute_values(":id", s("a"))
                .expression_attribute_values(":v", s("1"))
                .isolation(level)
                .send()
                .await,
        );
        // The legacy AttributesToGet, and lock attributes in keys.
        let legacy = KeysAndAttributes::builder()
            .keys(key("a"))
            .attributes_to_get("_TxG")
            .build()
            .unwrap();
        expect_invalid_because(
            "batch get AttributesToGet",
            "AttributesToGet",
            m.batch_get_item()
                .request_items(&t, legacy)
                .isolation(level)
                .send()
                .await,
        );
        let mut locked_key = key("a");
        locked_key.insert("_TxId".into(), owner_id.clone());
        expect_invalid(
            "get with a lock attribute in the key",
            m.get_item()
                .table_name(&t)
                .set_key(Some(locked_key.clone()))
                .isolation(level)
                .send()
                .await,
        );
        expect_invalid(
            "scan starting at a key with a lock attribute",
            m.scan()
                .table_name(&t)
                .set_exclusive_start_key(Some(locked_key))
                .isolation(level)
                .send()
                .await,
        );
        cases += 4;
    }
    println!("{cases} requests rejected");
    assert!(cases > 500, "{cases} cases");

    // Nothing but key-schema lookups went out, and every lock is as it was.
    let sent_after = env.counter.snapshot();
    for (op, count) in &sent_after {
        let earlier = sent_before.get(op).copied().unwrap_or(0);
        assert!(
            op == "DescribeTable" || *count == earlier,
            "{op} sent {} times by rejected requests",
            count - earlier
        );
    }
    for id in ["a", "b", "free"] {
        assert_eq!(
            env.raw_get(&t, &key(id)).await.as_ref(),
            Some(&before[id]),
            "{id} changed by rejected requests"
        );
    }
    // The attackers' transactions wrote nothing; the owner's commits as if nothing had happened.
    for tx in attackers {
        tx.commit().await.unwrap();
    }
    owner.commit().await.unwrap();
    assert_eq!(env.raw_get(&t, &key("a")).await, Some(updated("a")));
    assert_eq!(env.raw_get(&t, &key("b")).await, Some(original("b")));
    assert_eq!(env.raw_get(&t, &key("free")).await, Some(original("free")));
    let records: Vec<Item> = env
        .scan_all(env.manager.transactions_table())
        .await
        .into_iter()
        .filter(|r| !r["_TxId"].as_s().unwrap().starts_with('~'))
        .collect();
    assert_eq!(records.len(), 1, "only the owner's record: {records:?}");
}

/// An item as a JSON map, for the typed API.
fn it_as_json(it: &Item) -> HashMap<String, serde_json::Value> {
    dynamodb_transactions::from_item(it.clone()).unwrap()
}

/// Every way of reading item `id` outside a transaction, at both levels: (path, items returned).
async fn isolated_reads(env: &TestEnv, id: &str) -> Vec<(String, Vec<Item>)> {
    let m = &env.manager;
    let t = &env.table;
    let mut out = Vec::new();
    for level in LEVELS {
        let get = m
            .get_item()
            .table_name(t)
            .key("Id", s(id))
            .consistent_read(true)
            .isolation(level)
            .send()
            .await
            .unwrap();
        out.push((format!("get {level:?}"), get.item.into_iter().collect()));
        let batch = m
            .batch_get_item()
            .request_items(
                t,
                KeysAndAttributes::builder()
                    .keys(key(id))
                    .consistent_read(true)
                    .build()
                    .unwrap(),
            )
            .isolation(level)
            .send()
            .await
            .unwrap();
        out.push((format!("batch get {level:?}"), batch.responses[t].clone()));
        let query = || {
            m.query()
                .table_name(t)
                .key_condition_expression("Id = :id")
                .expression_attribute_values(":id", s(id))
                .consistent_read(true)
                .isolation(level)
        };
        out.push((
            format!("query {level:?}"),
            query().send().await.unwrap().items,
        ));
        out.push((
            format!("query stream {level:?}"),
            query().into_stream().try_collect().await.unwrap(),
        ));
        let scan = || {
            m.scan()
                .table_name(t)
                .consistent_read(true)
                .isolation(level)
        };
        out.push((format!("scan {level:?}"), scan().send_all().await.unwrap()));
        let pages: Vec<_> = scan().into_pages().try_collect().await.unwrap();
        out.push((
            format!("scan pages {level:?}"),
            pages.iter().flat_map(|p| p.items().to_vec()).collect(),
        ));
        // Typed reads into a map that would keep any attribute.
        let typed: Option<HashMap<String, serde_json::Value>> =
            m.get(t, key(id), level).await.unwrap();
        out.push((
            format!("typed get {level:?}"),
            typed
                .map(|v| dynamodb_transactions::to_item(&v).unwrap())
                .into_iter()
                .collect(),
        ));
        let page_typed: Vec<HashMap<String, serde_json::Value>> =
            scan().send().await.unwrap().items_as().unwrap();
        out.push((
            format!("typed scan page {level:?}"),
            page_typed
                .iter()
                .map(|v| dynamodb_transactions::to_item(v).unwrap())
                .collect(),
        ));
    }
    out
}

/// Reads `id` every way, in and out of `tx`; nothing returned may carry lock attributes.
async fn assert_no_leaks(env: &TestEnv, tx: Option<&Transaction>, id: &str, state: &str) {
    let mut reads = isolated_reads(env, id).await;
    if let Some(tx) = tx {
        let got = tx
            .get_item()
            .table_name(&env.table)
            .key("Id", s(id))
            .send()
            .await
            .unwrap();
        reads.push(("tx get".into(), got.item.into_iter().collect()));
        let typed: Option<HashMap<String, serde_json::Value>> =
            tx.get(&env.table, key(id)).await.unwrap();
        reads.push((
            "tx typed get".into(),
            typed
                .map(|v| dynamodb_transactions::to_item(&v).unwrap())
                .into_iter()
                .collect(),
        ));
    }
    for (how, items) in reads {
        assert!(!items.is_empty(), "{state}: {how} found nothing");
        for i in items {
            assert!(
                !has_tx_attrs(&i),
                "{state}: {how} leaked lock attributes: {i:?}"
            );
        }
    }
}

#[tokio::test]
async fn no_read_path_leaks_lock_attributes() {
    let env = TestEnv::new("sec-leak").await;
    let t = env.table.clone();
    env.raw_put(&t, original("a")).await;
    assert_no_leaks(&env, None, "a", "unlocked").await;

    // Read-locked (not changed).
    let tx = env.manager.begin();
    tx.get_item()
        .table_name(&t)
        .key("Id", s("a"))
        .send()
        .await
        .unwrap();
    assert!(has_tx_attrs(&env.raw_get(&t, &key("a")).await.unwrap()));
    assert_no_leaks(&env, Some(&tx), "a", "read-locked").await;
    tx.commit().await.unwrap();

    // Applied but not committed, then committed.
    let tx = env.manager.begin();
    apply_update(&env, &tx, "a").await;
    assert_no_leaks(&env, Some(&tx), "a", "applied").await;
    tx.commit().await.unwrap();
    assert_eq!(env.raw_get(&t, &key("a")).await, Some(updated("a")));
    assert_no_leaks(&env, None, "a", "committed").await;
}

/// Each `ReturnValues` of an update, on an item this transaction has read-locked first (so the
/// stored item carries its lock when the update is applied) and on one it has not.
#[tokio::test]
async fn return_values_carry_no_lock_attributes() {
    let env = TestEnv::new("sec-rv").await;
    let t = env.table.clone();
    let cases = [
        (ReturnValue::AllOld, original("x")),
        (ReturnValue::AllNew, updated("x")),
        (
            ReturnValue::UpdatedOld,
            item(&[("v", n(1)), ("secret", s("before"))]),
        ),
        (
            ReturnValue::UpdatedNew,
            item(&[("v", n(2)), ("secret", s("after"))]),
        ),
    ];
    let tx = env.manager.begin();
    let mut ids = Vec::new();
    for (i, (rv, want)) in cases.iter().enumerate() {
        for read_first in [false, true] {
            let id = format!("rv{i}-{read_first}");
            env.raw_put(&t, original(&id)).await;
            if read_first {
                tx.get_item()
                    .table_name(&t)
                    .key("Id", s(&id))
                    .send()
                    .await
                    .unwrap();
            }
            let got = tx
                .update_item()
                .table_name(&t)
                .key("Id", s(&id))
                .update_expression("SET v = :v, secret = :s")
                .expression_attribute_values(":v", n(2))
                .expression_attribute_values(":s", s("after"))
                .return_values(rv.clone())
                .send()
                .await
                .unwrap();
            let mut want = want.clone();
            if want.contains_key("Id") {
                want.insert("Id".into(), s(&id));
            }
            assert_eq!(
                got.attributes,
                Some(want),
                "{rv:?}, read first {read_first}"
            );
            assert!(has_tx_attrs(&env.raw_get(&t, &key(&id)).await.unwrap()));
            ids.push(id);
        }
    }
    // ALL_OLD of a put and of a delete, after a read lock.
    for (id, del) in [("put", false), ("del", true)] {
        env.raw_put(&t, original(id)).await;
        tx.get_item()
            .table_name(&t)
            .key("Id", s(id))
            .send()
            .await
            .unwrap();
        let got = if del {
            tx.delete_item()
                .table_name(&t)
                .key("Id", s(id))
                .return_values(ReturnValue::AllOld)
                .send()
                .await
        } else {
            tx.put_item()
                .table_name(&t)
                .set_item(Some(updated(id)))
                .return_values(ReturnValue::AllOld)
                .send()
                .await
        };
        assert_eq!(got.unwrap().attributes, Some(original(id)), "{id}");
    }
    tx.commit().await.unwrap();
    for id in ids {
        assert_eq!(env.raw_get(&t, &key(&id)).await, Some(updated(&id)));
    }
    assert_eq!(env.raw_get(&t, &key("put")).await, Some(updated("put")));
    assert_eq!(env.raw_get(&t, &key("del")).await, None);
}

/// `ConditionFailed::item` is the item without this transaction's lock, whether the condition fails
/// when the write is applied early or at commit, on both commit paths.
#[tokio::test]
async fn condition_failures_carry_no_lock_attributes() {
    for phased in [false, true] {
        let env = TestEnv::with_settings("sec-cond", |s| {
            if phased {
                s.one_shot_max_items = 0;
            }
        })
        .await;
        let t = env.table.clone();
        for (id, early) in [("early", true), ("at-commit", false)] {
            env.raw_put(&t, original(id)).await;
            env.raw_put(&t, original("other")).await;
            let tx = env.manager.begin();
            let tx_id = tx.id().clone();
            tx.get_item()
                .table_name(&t)
                .key("Id", s(id))
                .send()
                .await
                .unwrap();
            tx.update_item()
                .table_name(&t)
                .key("Id", s("other"))
                .update_expression("SET v = :v")
                .expression_attribute_values(":v", n(5))
                .send()
                .await
                .unwrap();
            let mut u = tx
                .update_item()
                .table_name(&t)
                .key("Id", s(id))
                .update_expression("SET v = :v")
                .condition_expression("v = :nope")
                .expression_attribute_values(":v", n(2))
                .expression_attribute_values(":nope", n(99));
            if early {
                u = u.return_values(ReturnValue::AllNew);
            }
            let r = match u.send().await {
                Ok(_) if !early => tx.commit().await,
                Ok(out) => panic!("{id}: condition passed: {out:?}"),
                Err(e) => Err(e),
            };
            match r {
                Err(Error::ConditionFailed {
                    item: Some(found),
                    request_index,
                    ..
                }) => {
                    assert_eq!(found, original(id), "{id}, phased {phased}");
                    assert_eq!(request_index, 2);
                }
                other => panic!("{id}, phased {phased}: expected ConditionFailed, got {other:?}"),
            }
            assert_eq!(
                env.manager
                    .transaction_state(&tx_id)
                    .await
                    .unwrap()
                    .map(|s| s.state),
                Some(TxState::RolledBack)
            );
            assert_eq!(env.raw_get(&t, &key(id)).await, Some(original(id)));
            assert_eq!(
                env.raw_get(&t, &key("other")).await,
                Some(original("other"))
            );
        }
    }
}

/// A transaction resumed by id after it committed or rolled back refuses every new request with a
/// typed error, before sending anything: no item changes, no lock appears, the record stays as it
/// was.
#[tokio::test]
async fn a_resumed_finished_transaction_accepts_no_new_request() {
    let env = TestEnv::new("sec-finished").await;
    let t = env.table.clone();
    for commit in [true, false] {
        env.raw_put(&t, original("a")).await;
        env.raw_put(&t, original("b")).await;
        let tx = env.manager.begin();
        let id = tx.id().clone();
        apply_update(&env, &tx, "a").await;
        tx.put_item()
            .table_name(&t)
            .set_item(Some(updated("b")))
            .send()
            .await
            .unwrap();
        let (state, want) = if commit {
            tx.commit().await.unwrap();
            (TxState::Committed, updated("a"))
        } else {
            tx.rollback().await.unwrap();
            (TxState::RolledBack, original("a"))
        };
        let items_before = env.scan_all(&t).await;
        let record_before = env.scan_all(env.manager.transactions_table()).await;
        assert_eq!(env.raw_get(&t, &key("a")).await, Some(want));

        let resumed = env.manager.resume(&id).await.unwrap();
        let sent_before = env.counter.snapshot();
        let finished = |what: &str, got: Result<_, Error>| match (got, state) {
            (Err(Error::AlreadyCommitted { tx_id }), TxState::Committed)
            | (Err(Error::RolledBack { tx_id }), TxState::RolledBack) => {
                assert_eq!(tx_id, id, "{what}")
            }
            (other, _) => panic!("{what} on a {state:?} transaction: got {other:?}"),
        };
        for target in ["a", "b", "new"] {
            finished(
                "put",
                resumed
                    .put_item()
                    .table_name(&t)
                    .set_item(Some(original(target)))
                    .send()
                    .await
                    .map(|_| ()),
            );
            for rv in [ReturnValue::None, ReturnValue::AllOld, ReturnValue::AllNew] {
                finished(
                    "update",
                    resumed
                        .update_item()
                        .table_name(&t)
                        .key("Id", s(target))
                        .update_expression("SET v = :v")
                        .expression_attribute_values(":v", n(9))
                        .return_values(rv)
                        .send()
                        .await
                        .map(|_| ()),
                );
            }
            finished(
                "delete",
                resumed
                    .delete_item()
                    .table_name(&t)
                    .key("Id", s(target))
                    .return_values(ReturnValue::AllOld)
                    .send()
                    .await
                    .map(|_| ()),
            );
            finished(
                "get",
                resumed
                    .get_item()
                    .table_name(&t)
                    .key("Id", s(target))
                    .send()
                    .await
                    .map(|_| ()),
            );
        }
        // Only key-schema lookups may have gone out.
        for (op, count) in env.counter.snapshot() {
            assert!(
                op == "DescribeTable" || sent_before.get(&op) == Some(&count),
                "{op} sent by a finished transaction"
            );
        }
        // Finishing it again agrees with the outcome and changes nothing.
        if commit {
            assert!(matches!(
                env.manager.resume(&id).await.unwrap().rollback().await,
                Err(Error::AlreadyCommitted { .. })
            ));
        } else {
            assert!(
                env.manager
                    .resume(&id)
                    .await
                    .unwrap()
                    .commit()
                    .await
                    .unwrap_err()
                    .is_rolled_back()
            );
        }
        drop(resumed);
        assert_eq!(env.scan_all(&t).await, items_before);
        assert!(env.scan_all(&t).await.iter().all(|i| !has_tx_attrs(i)));
        assert_eq!(
            env.scan_all(env.manager.transactions_table()).await,
            record_before
        );
        assert_eq!(env.tx_state(&id).await, Some((state, true)));
    }
}
