//! Waiting in ticket order (`Settings::wait_in_ticket_order`): the queue an item carries refuses
//! newcomers behind an older live entry, an unlock carries the item's entries and the holder's
//! registrations, a registration lands only on a pending record; with the setting off nothing of
//! it is sent. Asserted on the items' and records' attributes, not on timings.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use dynamodb_transactions::fault::RequestCounter;
use dynamodb_transactions::{ContentionPolicy, Error, Item, TransactionManager, TxId};

use crate::common::*;
use crate::{lock, set_v, ticket_of};

mod carried;
mod commit_paths;
pub(crate) mod crashed_waiter;
mod joined;
mod left;

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A manager over the env's tables that waits in ticket order. `ticket_at_begin`: tickets taken
/// when a transaction first writes its record (else at its first contention).
fn fifo(env: &TestEnv, ticket_at_begin: bool, lock_wait: Duration) -> TransactionManager {
    fifo_on(env, client(), ticket_at_begin, lock_wait)
}

fn fifo_on(
    env: &TestEnv,
    client: aws_sdk_dynamodb::Client,
    ticket_at_begin: bool,
    lock_wait: Duration,
) -> TransactionManager {
    fifo_tuned(env, client, ticket_at_begin, lock_wait, |_| {})
}

/// [`fifo_on`] with more settings changed by `tune`.
fn fifo_tuned(
    env: &TestEnv,
    client: aws_sdk_dynamodb::Client,
    ticket_at_begin: bool,
    lock_wait: Duration,
    tune: impl FnOnce(&mut dynamodb_transactions::Settings),
) -> TransactionManager {
    crate::ordered_on(env, client, |s| {
        s.contention = ContentionPolicy::Ordered {
            dead_after: Duration::from_secs(30),
            ticket_at_begin,
        };
        s.lock_wait = lock_wait;
        s.wound_grace = Duration::from_millis(50);
        s.wait_in_ticket_order = true;
        s.queue_ttl = Duration::from_secs(600);
        tune(s);
    })
}

fn queue_value(entries: &[(u64, u64)]) -> AttributeValue {
    AttributeValue::M(entries.iter().map(|(t, e)| (t.to_string(), n(e))).collect())
}

fn first_value(entries: &[(u64, u64)]) -> AttributeValue {
    let (t, e) = entries.iter().min_by_key(|(t, _)| *t).unwrap();
    AttributeValue::M(HashMap::from([
        ("t".to_string(), n(t)),
        ("e".to_string(), n(e)),
    ]))
}

/// An unlocked item `v = 1` carrying the queue `entries` (ticket, expiry) at version `version`, as
/// an unlock leaves it.
fn queued_item(id: &str, entries: &[(u64, u64)], version: u64) -> Item {
    item(&[
        ("Id", s(id)),
        ("v", n(1)),
        ("_TxQ", queue_value(entries)),
        ("_TxQF", first_value(entries)),
        ("_TxQV", n(version)),
    ])
}

/// Makes the entry of ticket 0 on `k` (older than any ticket the counter hands out) expired, as if
/// its waiter had left a while ago.
async fn expire_oldest_entry(env: &TestEnv, table: &str, k: &str) {
    env.client
        .update_item()
        .table_name(table)
        .key("Id", s(k))
        .update_expression("SET #q.#t = :past, #f.#e = :past")
        .expression_attribute_names("#q", "_TxQ")
        .expression_attribute_names("#t", "0")
        .expression_attribute_names("#f", "_TxQF")
        .expression_attribute_names("#e", "e")
        .expression_attribute_values(":past", n(now_ms() - 1_000))
        .send()
        .await
        .unwrap();
}

/// The header row of `id`'s record.
async fn header(env: &TestEnv, id: &TxId) -> Item {
    env.record_rows(id)
        .await
        .into_iter()
        .find(|r| r.get("_TxN") == Some(&n(0)))
        .expect("a header row")
}

/// The registrations (ticket → expiry) a record holds.
fn registrations(header: &Item) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = header
        .iter()
        .filter_map(|(k, v)| {
            let rest = k.strip_prefix("_TxJ:")?;
            let t = rest.rsplit_once(':')?.1.parse().ok()?;
            Some((t, v.as_n().ok()?.parse().ok()?))
        })
        .collect();
    out.sort();
    out
}

fn is_locked_out(err: &Error) -> bool {
    matches!(err, Error::ItemLocked { .. })
}

#[tokio::test]
async fn a_newcomer_is_refused_behind_an_older_live_entry_and_passes_it_once_expired() {
    let env = TestEnv::new("ct-fifo-refuse").await;
    let far = now_ms() + 600_000;
    // Ticket 0 is older than every ticket the counter hands out.
    env.raw_put(&env.table, queued_item("k", &[(0, far)], 1))
        .await;
    for ticket_at_begin in [true, false] {
        let m = fifo(&env, ticket_at_begin, Duration::from_millis(400));
        let tx = m.begin();
        let err = lock(&tx, &env.table, "k").await.unwrap_err();
        assert!(
            is_locked_out(&err),
            "ticket_at_begin={ticket_at_begin}: {err:?}"
        );
        // Not locked; the refused transaction's entry joined the queue (see queue/joined.rs).
        let mine = ticket_of(&env, tx.id()).await;
        let raw = env.raw_get(&env.table, &key("k")).await.unwrap();
        assert!(!raw.contains_key("_TxId"), "{raw:?}");
        assert_eq!(raw["v"], n(1));
        assert_eq!(raw["_TxQF"].as_m().unwrap()["t"], n(0));
        assert_eq!(
            ticket_keys(&raw),
            vec![0, mine],
            "ticket_at_begin={ticket_at_begin}"
        );
        // Its rollback takes the entry back off (see queue/left.rs).
        tx.rollback().await.unwrap();
        let raw = env.raw_get(&env.table, &key("k")).await.unwrap();
        assert_eq!(ticket_keys(&raw), vec![0], "{raw:?}");
    }
    // The entry expired (its waiter left): the next attempt drops it and takes the item.
    for ticket_at_begin in [true, false] {
        let past = now_ms() - 1_000;
        env.raw_put(&env.table, queued_item("k", &[(0, past)], 1))
            .await;
        let m = fifo(&env, ticket_at_begin, Duration::from_secs(2));
        let tx = m.begin();
        lock(&tx, &env.table, "k").await.unwrap();
        let raw = env.raw_get(&env.table, &key("k")).await.unwrap();
        assert_eq!(raw["_TxId"], s(tx.id().as_str()));
        assert!(
            !raw.contains_key("_TxQ") && !raw.contains_key("_TxQF"),
            "{raw:?}"
        );
        assert_eq!(raw["_TxQV"], n(2), "the rewrite moved the version on");
        tx.commit().await.unwrap();
        assert_eq!(
            env.raw_get(&env.table, &key("k")).await.unwrap(),
            item(&[("Id", s("k")), ("v", n(1)), ("_TxQV", n(2))]),
            "ticket_at_begin={ticket_at_begin}: the unlock had nothing to carry"
        );
    }
}

#[tokio::test]
async fn a_younger_entry_does_not_hold_up_an_older_newcomer() {
    let env = TestEnv::new("ct-fifo-older").await;
    let far = now_ms() + 600_000;
    env.raw_put(&env.table, queued_item("k", &[(u64::MAX - 16, far)], 3))
        .await;
    let m = fifo(&env, true, Duration::from_secs(2));
    let tx = m.begin();
    lock(&tx, &env.table, "k").await.unwrap();
    tx.commit().await.unwrap();
    // Taken and released without touching the queue (a lock leaves it as it is).
    assert_eq!(
        env.raw_get(&env.table, &key("k")).await.unwrap(),
        queued_item("k", &[(u64::MAX - 16, far)], 3)
    );
}

/// The holder `h` of `k` (locked, its write applied by `apply`), a younger waiter that registers
/// on it and gives up, and the holder's own entry and an expired one on the item: after `finish`
/// (commit or rollback), the item carries the waiter's entry and the live one it carried, and is
/// `expected_v`.
async fn unlock_carries_queue(rollback: bool) {
    let env = TestEnv::new(if rollback {
        "ct-fifo-rb"
    } else {
        "ct-fifo-unlock"
    })
    .await;
    let (far, past) = (now_ms() + 600_000, now_ms() - 1_000);
    let young = u64::MAX - 16;
    env.raw_put(
        &env.table,
        queued_item("k", &[(young, far), (young - 1, past)], 1),
    )
    .await;
    let m = fifo(&env, true, Duration::from_millis(600));
    let h = m.begin();
    if rollback {
        // An update applied at once (for its return values): rolled back from its before-image.
        h.update_item()
            .table_name(&env.table)
            .key("Id", s("k"))
            .update_expression("SET v = :v")
            .expression_attribute_values(":v", n(2))
            .return_values(ReturnValue::AllNew)
            .send()
            .await
            .unwrap();
    } else {
        // A put, applied by the commit (before its decision) under the lock: it carries the
        // item's queue.
        lock(&h, &env.table, "k").await.unwrap();
        h.put_item()
            .table_name(&env.table)
            .item("Id", s("k"))
            .item("v", n(2))
            .send()
            .await
            .unwrap();
    }
    let mine = ticket_of(&env, h.id()).await;
    // The holder's own entry, carried from an earlier wait at this item.
    env.client
        .update_item()
        .table_name(&env.table)
        .key("Id", s("k"))
        .update_expression("SET #q.#t = :e")
        .expression_attribute_names("#q", "_TxQ")
        .expression_attribute_names("#t", mine.to_string())
        .expression_attribute_values(":e", n(far))
        .send()
        .await
        .unwrap();
    let raw = env.raw_get(&env.table, &key("k")).await.unwrap();
    assert_eq!(raw["_TxId"], s(h.id().as_str()), "{raw:?}");
    assert_eq!(raw.contains_key("_TxA"), rollback, "applied: {raw:?}");
    assert_eq!(raw.get("_TxQV"), Some(&n(1)), "{raw:?}");
    let before = header(&env, h.id()).await;

    // A younger transaction waits for the holder: it registers, then gives up.
    let w = m.begin();
    lock(&w, &env.table, "other").await.unwrap();
    let theirs = ticket_of(&env, w.id()).await;
    assert!(mine < theirs);
    let err = lock(&w, &env.table, "k").await.unwrap_err();
    assert!(is_locked_out(&err), "{err:?}");
    let after = header(&env, h.id()).await;
    let reg = registrations(&after);
    assert_eq!(reg.len(), 1, "{after:?}");
    assert_eq!(reg[0].0, theirs);
    let e_w = reg[0].1;
    for a in ["_TxV", "_TxD", "_TxS"] {
        assert_eq!(
            before.get(a),
            after.get(a),
            "{a}: the registration left it alone"
        );
    }

    let hid = h.id().clone();
    if rollback {
        h.rollback().await.unwrap();
    } else {
        h.commit().await.unwrap();
    }
    let expected = item(&[
        ("Id", s("k")),
        ("v", n(if rollback { 1 } else { 2 })),
        ("_TxQ", queue_value(&[(theirs, e_w), (young, far)])),
        ("_TxQF", first_value(&[(theirs, e_w)])),
        ("_TxQV", n(2)),
    ]);
    assert_eq!(env.raw_get(&env.table, &key("k")).await.unwrap(), expected);
    // Completing again (a second completer, a lost answer) writes nothing more.
    m.complete_transaction(&hid).await.unwrap();
    assert_eq!(env.raw_get(&env.table, &key("k")).await.unwrap(), expected);
    // Reads never show the queue.
    let got = m
        .get_item()
        .table_name(&env.table)
        .key("Id", s("k"))
        .send()
        .await
        .unwrap();
    assert!(!has_tx_attrs(got.item().unwrap()));

    // A newcomer younger than the waiter is refused while the waiter's entry lives; the waiter
    // (its `run` retry keeps its ticket: here the same handle) takes the item.
    let late = m.begin();
    lock(&late, &env.table, "other2").await.unwrap();
    let err = lock(&late, &env.table, "k").await.unwrap_err();
    assert!(is_locked_out(&err), "{err:?}");
    lock(&w, &env.table, "k").await.unwrap();
    w.commit().await.unwrap();
    let late_t = ticket_of(&env, late.id()).await;
    let raw = env.raw_get(&env.table, &key("k")).await.unwrap();
    assert_eq!(ticket_keys(&raw), vec![late_t, young], "{raw:?}");
    late.rollback().await.unwrap();
    let raw = env.raw_get(&env.table, &key("k")).await.unwrap();
    // The waiter's own entry dropped by its unlock; the refused newcomer's (it joined the free
    // item's queue) taken off by its rollback.
    assert_eq!(ticket_keys(&raw), vec![young], "{raw:?}");
    assert_eq!(raw["_TxQV"], n(5), "the join, the unlock, the leave");
}

#[tokio::test]
async fn a_commit_unlock_carries_the_items_queue_and_the_registered_waiters() {
    unlock_carries_queue(false).await;
}

#[tokio::test]
async fn a_rollback_restores_the_item_with_the_queue_carried() {
    unlock_carries_queue(true).await;
}

#[tokio::test]
async fn a_registration_lands_only_on_a_pending_record() {
    let env = TestEnv::new("ct-fifo-reg").await;
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    let m = fifo(&env, true, Duration::from_secs(2));
    let (table, k) = (env.table.clone(), key("k"));
    let h = m.begin();
    lock(&h, &table, "k").await.unwrap();
    let before = header(&env, h.id()).await;
    let ttl = Duration::from_secs(60);
    assert!(
        dynamodb_transactions::fault::register_waiter(&m, h.id(), &table, &k, 7, ttl)
            .await
            .unwrap()
    );
    let after = header(&env, h.id()).await;
    assert_eq!(registrations(&after).len(), 1);
    for a in ["_TxV", "_TxD"] {
        assert_eq!(before.get(a), after.get(a), "{a}");
    }
    let hid = h.id().clone();
    h.commit().await.unwrap();
    let decided = header(&env, &hid).await;
    assert!(
        !dynamodb_transactions::fault::register_waiter(&m, &hid, &table, &k, 8, ttl)
            .await
            .unwrap()
    );
    assert_eq!(header(&env, &hid).await, decided, "nothing registered");
    // Nobody else registered: the unlock carried ticket 7's entry.
    let raw = env.raw_get(&env.table, &key("k")).await.unwrap();
    assert_eq!(ticket_keys(&raw), vec![7]);
    // An absent record takes no registration either.
    let gone = TxId::from("no-such-transaction".to_string());
    assert!(
        !dynamodb_transactions::fault::register_waiter(&m, &gone, &table, &k, 9, ttl)
            .await
            .unwrap()
    );
}

fn ticket_keys(raw: &Item) -> Vec<u64> {
    let mut out: Vec<u64> = raw
        .get("_TxQ")
        .and_then(|v| v.as_m().ok())
        .map(|m| m.keys().map(|t| t.parse().unwrap()).collect())
        .unwrap_or_default();
    out.sort();
    out
}

/// Every request body a client sends.
#[derive(Debug, Clone, Default)]
struct Bodies(Arc<Mutex<Vec<String>>>);

impl aws_sdk_dynamodb::config::Intercept for Bodies {
    fn name(&self) -> &'static str {
        "Bodies"
    }

    fn read_before_transmit(
        &self,
        ctx: &aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
        _: &aws_sdk_dynamodb::config::RuntimeComponents,
        _: &mut aws_sdk_dynamodb::config::ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        let body = ctx.request().body().bytes().unwrap_or_default();
        self.0
            .lock()
            .unwrap()
            .push(String::from_utf8_lossy(body).into_owned());
        Ok(())
    }
}

#[tokio::test]
async fn with_the_setting_off_nothing_of_the_queue_is_sent() {
    let env = TestEnv::new("ct-fifo-off").await;
    for k in ["a", "b", "k"] {
        env.raw_put(&env.table, item(&[("Id", s(k)), ("v", n(1))]))
            .await;
    }
    let bodies = Bodies::default();
    let counter = RequestCounter::new();
    let c = client_with(vec![shared(bodies.clone()), shared(counter.clone())]);
    let m = TransactionManager::builder(c)
        .transactions_table(env.manager.transactions_table())
        .images_table(env.manager.images_table())
        .configure(|s| {
            s.rollback_on_drop = false;
            s.write_only_fast_path = false;
            s.lock_wait = Duration::from_millis(300);
        })
        .build();
    assert!(!m.settings().wait_in_ticket_order, "off by default");
    m.get_item()
        .table_name(&env.table)
        .key("Id", s("warm-up"))
        .send()
        .await
        .unwrap();
    counter.reset();
    // Two updates: the record and both locks in one request, then the commit (as documented).
    let tx = m.begin();
    for k in ["a", "b"] {
        set_v(&tx, &env.table, k, 2).await.unwrap();
    }
    tx.commit().await.unwrap();
    assert_eq!(counter.total(), 2, "{:?}", counter.snapshot());
    // Contention: a younger transaction waits for an older holder, then gives up.
    let h = m.begin();
    lock(&h, &env.table, "k").await.unwrap();
    let w = m.begin();
    lock(&w, &env.table, "other").await.unwrap();
    // (The waiter may wound the holder: neither has a ticket before it meets the other.)
    let _ = lock(&w, &env.table, "k").await;
    let _ = h.commit().await;
    w.rollback().await.unwrap();
    let sent = bodies.0.lock().unwrap();
    assert!(sent.len() > 5);
    for b in sent.iter() {
        for needle in ["_TxQF", "_TxQV", "_TxJ", "\"#_TxQ\""] {
            assert!(
                !b.contains(needle),
                "{needle} sent with the setting off: {b}"
            );
        }
    }
}

#[tokio::test]
async fn transfers_on_hot_items_waiting_in_ticket_order_all_commit_and_conserve_money() {
    let env = TestEnv::new("ct-fifo-load").await;
    let accounts = ["a0", "a1", "a2"];
    for k in accounts {
        env.raw_put(&env.table, item(&[("Id", s(k)), ("v", n(100))]))
            .await;
    }
    let m = TransactionManager::builder(client())
        .transactions_table(env.manager.transactions_table())
        .images_table(env.manager.images_table())
        .configure(|s| {
            s.rollback_on_drop = false;
            s.wait_in_ticket_order = true;
            s.lock_wait = Duration::from_secs(10);
            s.run_attempts = 20;
        })
        .build();
    let (workers, per_worker) = (6, 5);
    let mut handles = Vec::new();
    for w in 0..workers {
        let (m, table) = (m.clone(), env.table.clone());
        handles.push(async move {
            for i in 0..per_worker {
                let from = accounts[(w + i) % accounts.len()];
                let to = accounts[(w + i + 1) % accounts.len()];
                m.run(async |tx| {
                    for (k, d) in [(from, -1), (to, 1)] {
                        let got = tx
                            .get_item()
                            .table_name(&table)
                            .key("Id", s(k))
                            .send()
                            .await?;
                        let v: i64 = got.item().unwrap()["v"].as_n().unwrap().parse().unwrap();
                        tx.update_item()
                            .table_name(&table)
                            .key("Id", s(k))
                            .update_expression("SET v = :v")
                            .expression_attribute_values(":v", n(v + d))
                            .send()
                            .await?;
                    }
                    Ok(())
                })
                .await
                .unwrap_or_else(|e| panic!("worker {w} transfer {i}: {e:?}"));
            }
        });
    }
    futures::future::join_all(handles).await;
    let mut total = 0;
    for k in accounts {
        let raw = env.raw_get(&env.table, &key(k)).await.unwrap();
        assert!(!raw.contains_key("_TxId"), "{k} left locked: {raw:?}");
        // Consistent: through the DynamoDB profile an eventually consistent read may be stale.
        let got = m
            .get_item()
            .table_name(&env.table)
            .key("Id", s(k))
            .consistent_read(true)
            .send()
            .await
            .unwrap();
        let it = got.item().unwrap();
        assert!(!has_tx_attrs(it), "{it:?}");
        total += it["v"].as_n().unwrap().parse::<i64>().unwrap();
        assert_eq!(raw["v"], it["v"], "{k}");
    }
    assert_eq!(total, 300, "money conserved");
}

#[tokio::test]
async fn a_competitor_completes_an_abandoned_holder_and_takes_its_queued_item() {
    // The holder meets the item's queue, so it takes a ticket and is older than the competitor,
    // which waits until it is judged dead.
    let env = TestEnv::with_settings("ct-fifo-abandon", |s| {
        s.wait_in_ticket_order = true;
        s.contention = ContentionPolicy::Ordered {
            dead_after: Duration::from_secs(1),
            ticket_at_begin: false,
        };
    })
    .await;
    let far = now_ms() + 600_000;
    let young = u64::MAX - 16;
    env.raw_put(&env.table, queued_item("k", &[(young, far)], 1))
        .await;
    let h = env.manager.begin();
    h.update_item()
        .table_name(&env.table)
        .key("Id", s("k"))
        .update_expression("SET v = :v")
        .expression_attribute_values(":v", n(2))
        .return_values(ReturnValue::AllNew)
        .send()
        .await
        .unwrap();
    let hid = h.id().clone();
    dynamodb_transactions::fault::register_waiter(
        &env.manager,
        &hid,
        &env.table,
        &key("k"),
        young + 1,
        Duration::from_secs(600),
    )
    .await
    .unwrap();
    h.abandon();
    let (m2, _) = env.second_coordinator();
    let t = m2.begin();
    lock(&t, &env.table, "k").await.unwrap();
    t.commit().await.unwrap();
    let raw = env.raw_get(&env.table, &key("k")).await.unwrap();
    assert_eq!(ticket_keys(&raw), vec![young, young + 1], "{raw:?}");
    assert_eq!(raw["v"], n(1), "rolled back");
}
