//! Contention policies: who waits, who is rolled back, and that no schedule deadlocks.
mod common;

use std::time::Duration;

use common::*;
use dynamodb_transactions::{ContentionPolicy, Error, TransactionManager, TxId, TxState};

/// Managers over the env's tables with tickets taken when a transaction begins (so ticket order is
/// the order in which the transactions first wrote), a short lock wait and the given dead time.
fn ordered(env: &TestEnv, dead_after: Duration) -> TransactionManager {
    TransactionManager::builder(client())
        .transactions_table(env.manager.transactions_table())
        .images_table(env.manager.images_table())
        .configure(|s| {
            s.rollback_on_drop = false;
            s.contention = ContentionPolicy::Ordered {
                dead_after,
                ticket_at_begin: true,
            };
            s.lock_wait = Duration::from_millis(400);
            s.wound_grace = Duration::from_millis(50);
        })
        .build()
}

async fn ticket_of(env: &TestEnv, id: &dynamodb_transactions::TxId) -> u64 {
    let row = env
        .raw_get(
            env.manager.transactions_table(),
            &item(&[("_TxId", s(id.as_str())), ("_TxN", n(0))]),
        )
        .await
        .unwrap();
    row["_TxK"].as_n().unwrap().parse().unwrap()
}

#[tokio::test]
async fn a_younger_transaction_waits_for_an_older_one_and_never_rolls_it_back() {
    let env = TestEnv::new("ct-wait").await;
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    let m = ordered(&env, Duration::from_secs(30));
    let old = m.begin();
    old.get_item()
        .table_name(&env.table)
        .key("Id", s("k"))
        .send()
        .await
        .unwrap();
    let young = m.begin();
    young
        .get_item()
        .table_name(&env.table)
        .key("Id", s("other"))
        .send()
        .await
        .unwrap();
    assert!(ticket_of(&env, old.id()).await < ticket_of(&env, young.id()).await);

    // The younger one meets the older one's lock: it waits, then gives up, and the older one is
    // untouched.
    let err = young
        .get_item()
        .table_name(&env.table)
        .key("Id", s("k"))
        .send()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ItemLocked { .. }), "{err:?}");
    assert!(err.is_retryable());
    assert_eq!(
        env.tx_state(old.id()).await,
        Some((TxState::Pending, false))
    );
    let raw = env.raw_get(&env.table, &key("k")).await.unwrap();
    assert_eq!(
        raw["_TxId"],
        s(old.id().as_str()),
        "still locked by the older transaction"
    );

    old.update_item()
        .table_name(&env.table)
        .key("Id", s("k"))
        .update_expression("SET v = :two")
        .expression_attribute_values(":two", n(2))
        .send()
        .await
        .unwrap();
    old.commit().await.unwrap();
    young.rollback().await.unwrap();
    assert_eq!(
        env.raw_get(&env.table, &key("k")).await.unwrap(),
        item(&[("Id", s("k")), ("v", n(2))])
    );
}

#[tokio::test]
async fn an_older_transaction_rolls_back_a_younger_one() {
    let env = TestEnv::new("ct-wound").await;
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    let m = ordered(&env, Duration::from_secs(30));
    let old = m.begin();
    old.get_item()
        .table_name(&env.table)
        .key("Id", s("first"))
        .send()
        .await
        .unwrap();
    let young = m.begin();
    young
        .get_item()
        .table_name(&env.table)
        .key("Id", s("k"))
        .send()
        .await
        .unwrap();
    young
        .update_item()
        .table_name(&env.table)
        .key("Id", s("k"))
        .update_expression("SET v = :y")
        .expression_attribute_values(":y", n(100))
        .return_values(aws_sdk_dynamodb::types::ReturnValue::AllNew)
        .send()
        .await
        .unwrap();
    assert!(ticket_of(&env, old.id()).await < ticket_of(&env, young.id()).await);

    // The older one needs the item: after a short grace it rolls the younger one back.
    let got = old
        .get_item()
        .table_name(&env.table)
        .key("Id", s("k"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        got.item.unwrap()["v"],
        n(1),
        "the younger one's applied write was undone"
    );
    assert_eq!(
        env.tx_state(young.id()).await,
        Some((TxState::RolledBack, true))
    );
    assert!(young.commit().await.unwrap_err().is_rolled_back());
    old.commit().await.unwrap();
    assert_eq!(
        env.raw_get(&env.table, &key("k")).await.unwrap(),
        item(&[("Id", s("k")), ("v", n(1))])
    );
}

#[tokio::test]
async fn a_dead_transaction_is_rolled_back_whatever_its_ticket() {
    let env = TestEnv::new("ct-dead").await;
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    let m = ordered(&env, Duration::from_millis(300));
    let old = m.begin();
    let old_id = old.id().clone();
    old.get_item()
        .table_name(&env.table)
        .key("Id", s("k"))
        .send()
        .await
        .unwrap();
    old.abandon(); // its coordinator dies, holding the lock
    tokio::time::sleep(Duration::from_millis(400)).await;
    let young = m.begin();
    young
        .get_item()
        .table_name(&env.table)
        .key("Id", s("k"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        env.tx_state(&old_id).await,
        Some((TxState::RolledBack, true))
    );
    young.commit().await.unwrap();
    assert_eq!(
        env.raw_get(&env.table, &key("k")).await.unwrap(),
        item(&[("Id", s("k")), ("v", n(1))])
    );
}

#[tokio::test]
async fn roll_back_others_policy_rolls_back_the_holder_whatever_its_age() {
    let env = TestEnv::with_settings("ct-rbo", |s| {
        s.contention = ContentionPolicy::RollBackOthers
    })
    .await;
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    let old = env.manager.begin();
    old.get_item()
        .table_name(&env.table)
        .key("Id", s("k"))
        .send()
        .await
        .unwrap();
    let young = env.manager.begin();
    young
        .get_item()
        .table_name(&env.table)
        .key("Id", s("k"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        env.tx_state(old.id()).await,
        Some((TxState::RolledBack, true))
    );
    assert!(old.commit().await.unwrap_err().is_rolled_back());
    young.commit().await.unwrap();
}

#[tokio::test]
async fn crossing_lock_orders_never_deadlock() {
    let env = TestEnv::new("ct-cross").await;
    for k in ["a", "b", "c"] {
        env.raw_put(&env.table, item(&[("Id", s(k)), ("v", n(0))]))
            .await;
    }
    // Default policy: tickets at first contention.
    let orders: [&[&str]; 4] = [
        &["a", "b", "c"],
        &["c", "b", "a"],
        &["b", "a", "c"],
        &["c", "a", "b"],
    ];
    let mut handles = Vec::new();
    for (w, order) in orders.iter().enumerate() {
        let m = TransactionManager::builder(client())
            .transactions_table(env.manager.transactions_table())
            .images_table(env.manager.images_table())
            .configure(|s| s.run_attempts = 50)
            .build();
        let table = env.table.clone();
        let order: Vec<String> = order.iter().map(|s| s.to_string()).collect();
        handles.push(tokio::spawn(async move {
            for _ in 0..4 {
                let (table, order) = (table.clone(), order.clone());
                m.run(async move |tx| {
                    // Read every item in this worker's order, then increment all of them.
                    let mut vals = Vec::new();
                    for k in &order {
                        let it = tx
                            .get_item()
                            .table_name(&table)
                            .key("Id", s(k))
                            .send()
                            .await?;
                        vals.push(
                            it.item.unwrap()["v"]
                                .as_n()
                                .unwrap()
                                .parse::<i64>()
                                .unwrap(),
                        );
                    }
                    for (k, v) in order.iter().zip(vals) {
                        tx.put_item()
                            .table_name(&table)
                            .item("Id", s(k))
                            .item("v", n(v + 1))
                            .send()
                            .await?;
                    }
                    Ok::<_, Error>(())
                })
                .await
                .unwrap_or_else(|e| panic!("worker {w}: {e}"));
            }
        }));
    }
    for h in handles {
        tokio::time::timeout(Duration::from_secs(120), h)
            .await
            .expect("no deadlock")
            .unwrap();
    }
    // 4 workers x 4 increments, no lost update.
    for k in ["a", "b", "c"] {
        assert_eq!(
            env.raw_get(&env.table, &key(k)).await.unwrap(),
            item(&[("Id", s(k)), ("v", n(16))])
        );
    }
}

#[tokio::test]
async fn a_retried_unit_of_work_keeps_its_ticket() {
    let env = TestEnv::new("ct-keep").await;
    let m = ordered(&env, Duration::from_secs(30));
    let attempts = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let ids = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (table, a2, ids2) = (env.table.clone(), attempts.clone(), ids.clone());
    m.run(async move |tx| {
        ids2.lock().unwrap().push(tx.id().clone());
        tx.get_item()
            .table_name(&table)
            .key("Id", s("k"))
            .send()
            .await?;
        if a2.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            // The first attempt loses (as if rolled back by a competitor).
            return Err(Error::RolledBack {
                tx_id: tx.id().clone(),
            });
        }
        Ok(())
    })
    .await
    .unwrap();
    let ids = ids.lock().unwrap().clone();
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0], ids[1]);
    assert_eq!(
        ticket_of(&env, &ids[0]).await,
        ticket_of(&env, &ids[1]).await,
        "same ticket on retry"
    );
}

/// Like [`ordered`], but tickets are taken at first contention (the default).
fn ordered_lazy(env: &TestEnv) -> TransactionManager {
    TransactionManager::builder(client())
        .transactions_table(env.manager.transactions_table())
        .images_table(env.manager.images_table())
        .configure(|s| {
            s.rollback_on_drop = false;
            s.contention = ContentionPolicy::Ordered {
                dead_after: Duration::from_secs(30),
                ticket_at_begin: false,
            };
            // Long enough that a loaded machine never makes the older one give up; with the old
            // bug both sides wait this long and the older one fails.
            s.lock_wait = Duration::from_secs(3);
            s.wound_grace = Duration::from_millis(50);
        })
        .build()
}

async fn lock(tx: &dynamodb_transactions::Transaction, table: &str, k: &str) -> Result<(), Error> {
    tx.get_item()
        .table_name(table)
        .key("Id", s(k))
        .send()
        .await
        .map(|_| ())
}

/// `t` (holding "a", its record carrying the older ticket) and `young` (holding "b", younger)
/// each need the other's item. `t` must win without waiting for `young`: `young` waits for `t`
/// (or is rolled back), `t` rolls `young` back, commits, and nothing stays locked.
async fn crossing_with_the_older_transaction_wins(
    env: &TestEnv,
    t: dynamodb_transactions::Transaction,
    young: dynamodb_transactions::Transaction,
) {
    let (older, younger) = tokio::join!(lock(&t, &env.table, "b"), lock(&young, &env.table, "a"));
    older.expect("the older transaction takes the younger one's item without a wait cycle");
    let err = younger.expect_err("the younger transaction does not get the older one's item");
    // Wounded, or (on a loaded machine) it gave up waiting for the older one before noticing: both
    // are outcomes without a wait cycle; its commit below must then find it rolled back.
    assert!(
        err.is_rolled_back() || matches!(err, Error::ItemLocked { .. }),
        "the younger one was wounded or gave up waiting: {err:?}"
    );
    for k in ["a", "b"] {
        t.put_item()
            .table_name(&env.table)
            .item("Id", s(k))
            .item("v", n(7))
            .send()
            .await
            .unwrap();
    }
    let (t_id, young_id) = (t.id().clone(), young.id().clone());
    t.commit().await.unwrap();
    assert!(young.commit().await.unwrap_err().is_rolled_back());
    assert_eq!(env.tx_state(&t_id).await, Some((TxState::Committed, true)));
    assert_eq!(
        env.manager
            .transaction_state(&young_id)
            .await
            .unwrap()
            .map(|s| s.state),
        Some(TxState::RolledBack)
    );
    for k in ["a", "b"] {
        assert_eq!(
            env.raw_get(&env.table, &key(k)).await.unwrap(),
            item(&[("Id", s(k)), ("v", n(7))]),
            "{k}: the older transaction's write, no lock left"
        );
    }
}

#[tokio::test]
async fn a_resumed_transaction_keeps_the_ticket_in_its_record() {
    let env = TestEnv::new("ct-resume").await;
    for k in ["a", "b"] {
        env.raw_put(&env.table, item(&[("Id", s(k)), ("v", n(0))]))
            .await;
    }
    let m = ordered(&env, Duration::from_secs(30));
    // T takes its ticket as it begins and locks "a"; its coordinator dies.
    let t = m.begin();
    lock(&t, &env.table, "a").await.unwrap();
    let t_id = t.id().clone();
    t.abandon();
    // U, younger, locks "b".
    let u = m.begin();
    lock(&u, &env.table, "b").await.unwrap();
    assert!(ticket_of(&env, &t_id).await < ticket_of(&env, u.id()).await);
    // T is resumed by a new coordinator; T and U now need each other's item.
    let t = m.resume(&t_id).await.unwrap();
    let before = ticket_of(&env, &t_id).await;
    crossing_with_the_older_transaction_wins(&env, t, u).await;
    assert_eq!(
        ticket_of(&env, &t_id).await,
        before,
        "the record's ticket never changes"
    );
}

#[tokio::test]
async fn a_second_handle_adopts_the_ticket_another_handle_recorded() {
    let env = TestEnv::new("ct-second").await;
    for k in ["a", "b", "z"] {
        env.raw_put(&env.table, item(&[("Id", s(k)), ("v", n(0))]))
            .await;
    }
    let lazy = ordered_lazy(&env);
    // T locks "a" with no ticket yet; a second handle of T is made now (its record has no ticket).
    let t = lazy.begin();
    lock(&t, &env.table, "a").await.unwrap();
    let t2 = lazy.resume(t.id()).await.unwrap();
    // T's first handle meets contention (X, without a ticket, holds "z"): T's record gets its
    // ticket, and X is rolled back.
    let x = lazy.begin();
    lock(&x, &env.table, "z").await.unwrap();
    lock(&t, &env.table, "z").await.unwrap();
    let x_id = x.id().clone();
    x.abandon();
    assert_eq!(
        env.manager
            .transaction_state(&x_id)
            .await
            .unwrap()
            .map(|s| s.state),
        Some(TxState::RolledBack)
    );
    // U, younger than T, locks "b".
    let u = ordered(&env, Duration::from_secs(30)).begin();
    lock(&u, &env.table, "b").await.unwrap();
    assert!(ticket_of(&env, t.id()).await < ticket_of(&env, u.id()).await);
    // The second handle, not the one that took the ticket, meets U.
    let before = ticket_of(&env, t.id()).await;
    t.abandon();
    let t_id = t2.id().clone();
    crossing_with_the_older_transaction_wins(&env, t2, u).await;
    assert_eq!(
        ticket_of(&env, &t_id).await,
        before,
        "the record's ticket never changes"
    );
    assert_eq!(
        env.raw_get(&env.table, &key("z")).await.unwrap(),
        item(&[("Id", s("z")), ("v", n(0))])
    );
}

// ---------------------------------------------------------------------------------------------
// A wound decides only what was judged.
// ---------------------------------------------------------------------------------------------

/// A coordinator over the env's tables with the ordered policy, on `client`.
fn ordered_on(
    env: &TestEnv,
    client: aws_sdk_dynamodb::Client,
    dead_after: Duration,
    lock_wait: Duration,
    ticket_at_begin: bool,
) -> TransactionManager {
    TransactionManager::builder(client)
        .transactions_table(env.manager.transactions_table())
        .images_table(env.manager.images_table())
        .configure(|s| {
            s.rollback_on_drop = false;
            s.write_only_fast_path = false;
            s.contention = ContentionPolicy::Ordered {
                dead_after,
                ticket_at_begin,
            };
            s.lock_wait = lock_wait;
            s.wound_grace = Duration::from_millis(50);
        })
        .build()
}

/// Holds the contender's wound (the request deciding the victim: it carries the placeholder
/// `:_TxTo`) until `f` has run on a fresh runtime with a fresh coordinator over `env`'s tables.
fn before_the_wound<T: Send + 'static>(
    env: &TestEnv,
    f: impl AsyncFnOnce(TransactionManager) -> T + Send + 'static,
) -> (RunBefore, std::sync::Arc<std::sync::Mutex<Option<T>>>) {
    let (txt, imgt) = (
        env.manager.transactions_table().to_string(),
        env.manager.images_table().to_string(),
    );
    let out = std::sync::Arc::new(std::sync::Mutex::new(None));
    let out_hook = out.clone();
    let hook = RunBefore::new("*", ":_TxTo", move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let m = TransactionManager::builder(client())
            .transactions_table(&txt)
            .images_table(&imgt)
            .configure(|s| {
                s.rollback_on_drop = false;
                s.write_only_fast_path = false;
            })
            .build();
        *out_hook.lock().unwrap() = Some(rt.block_on(f(m)));
    });
    (hook, out)
}

/// Makes a record look idle: sets its last-update time `ago` in the past.
async fn age_record(env: &TestEnv, id: &TxId, ago: Duration) {
    env.client
        .update_item()
        .table_name(env.manager.transactions_table())
        .key("_TxId", s(id.as_str()))
        .key("_TxN", n(0))
        .update_expression("SET #d = :d")
        .expression_attribute_names("#d", "_TxD")
        .expression_attribute_values(":d", n(now_ms() - ago.as_millis() as u64))
        .send()
        .await
        .unwrap();
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The holder of "k" locked it (and "b" later, through another coordinator) and is committed at
/// the end: "k" keeps its value, "b" has the holder's, and no lock is left.
async fn holder_commits(env: &TestEnv, holder: dynamodb_transactions::Transaction, wrote_b: bool) {
    let id = holder.id().clone();
    holder.commit().await.unwrap();
    assert_eq!(env.tx_state(&id).await, Some((TxState::Committed, true)));
    assert_eq!(
        env.raw_get(&env.table, &key("k")).await.unwrap(),
        item(&[("Id", s("k")), ("v", n(1))]),
        "no lock left on k"
    );
    if wrote_b {
        assert_eq!(
            env.raw_get(&env.table, &key("b")).await.unwrap(),
            item(&[("Id", s("b")), ("v", s("new"))]),
            "the holder's late write, no lock left"
        );
    }
}

/// Finding 1 (wound): the holder of "k" is judged dead (untouched for `dead_after`), but just
/// before the contender's wound is sent, the holder's coordinator appends a request (a new version
/// and last-update time). The wound must not decide a version it never judged: the holder stays
/// pending (the contender, younger, waits for it) and commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_judged_dead_that_appends_before_the_wound_is_not_rolled_back() {
    let env = TestEnv::new("ct-dead-append").await;
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    let dead_after = Duration::from_secs(30);
    let m = ordered_on(&env, client(), dead_after, Duration::from_millis(300), true);
    let holder = m.begin();
    lock(&holder, &env.table, "k").await.unwrap();
    let holder_id = holder.id().clone();
    // Untouched for longer than `dead_after` (a long `dead_after`, so that once the holder writes
    // again it stays alive for the rest of the test however slow the machine is).
    age_record(&env, &holder_id, 2 * dead_after).await;

    let (table, hid) = (env.table.clone(), holder_id.clone());
    let (hook, appended) = before_the_wound(&env, async move |m: TransactionManager| {
        let live = m.resume(&hid).await?;
        live.put_item()
            .table_name(&table)
            .item("Id", s("b"))
            .item("v", s("new"))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld)
            .send()
            .await?;
        live.abandon();
        Ok::<_, Error>(())
    });
    let contender_mgr = ordered_on(
        &env,
        client_with(vec![shared(hook.clone())]),
        dead_after,
        Duration::from_millis(300),
        true,
    );
    let contender = contender_mgr.begin();
    let r = lock(&contender, &env.table, "k").await;
    assert!(hook.ran(), "the race was staged");
    appended.lock().unwrap().take().unwrap().unwrap();
    let err = r.unwrap_err();
    assert!(matches!(err, Error::ItemLocked { .. }), "{err:?}");
    assert_eq!(
        env.tx_state(&holder_id).await,
        Some((TxState::Pending, false)),
        "the holder, alive after all, was not rolled back"
    );
    contender.rollback().await.unwrap();
    holder_commits(&env, holder, true).await;
}

/// Finding 1 (wound), with a heartbeat: the holder judged dead touches its record (the write a
/// waiting coordinator makes: last-update time only, same version) just before the wound is sent.
/// The wound was judged on the old last-update time: it must not land.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_judged_dead_that_heartbeats_before_the_wound_is_not_rolled_back() {
    let env = TestEnv::new("ct-dead-beat").await;
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    let dead_after = Duration::from_secs(30);
    let m = ordered_on(&env, client(), dead_after, Duration::from_millis(300), true);
    let holder = m.begin();
    lock(&holder, &env.table, "k").await.unwrap();
    let holder_id = holder.id().clone();
    // Untouched for longer than `dead_after` (a long `dead_after`, so that once the holder writes
    // again it stays alive for the rest of the test however slow the machine is).
    age_record(&env, &holder_id, 2 * dead_after).await;

    let hid = holder_id.clone();
    let (hook, beat) = before_the_wound(&env, async move |m: TransactionManager| {
        client()
            .update_item()
            .table_name(m.transactions_table())
            .key("_TxId", s(hid.as_str()))
            .key("_TxN", n(0))
            .update_expression("SET #d = :now")
            .condition_expression("#s = :p")
            .expression_attribute_names("#d", "_TxD")
            .expression_attribute_names("#s", "_TxS")
            .expression_attribute_values(":now", n(now_ms()))
            .expression_attribute_values(":p", s("P"))
            .send()
            .await
            .map(|_| ())
    });
    let contender_mgr = ordered_on(
        &env,
        client_with(vec![shared(hook.clone())]),
        dead_after,
        Duration::from_millis(300),
        true,
    );
    let contender = contender_mgr.begin();
    let r = lock(&contender, &env.table, "k").await;
    assert!(hook.ran(), "the race was staged");
    beat.lock().unwrap().take().unwrap().unwrap();
    let err = r.unwrap_err();
    assert!(matches!(err, Error::ItemLocked { .. }), "{err:?}");
    assert_eq!(
        env.tx_state(&holder_id).await,
        Some((TxState::Pending, false)),
        "the holder, alive after all, was not rolled back"
    );
    contender.rollback().await.unwrap();
    holder_commits(&env, holder, false).await;
}

/// Finding 2 (wound): the victim took its ticket from the counter before the contender took
/// its own, but records it only after the contender read its record (no ticket there yet) and
/// decided to wound it. The wound must not land: the victim is older; the contender waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_victim_recording_an_older_ticket_before_the_wound_is_not_rolled_back() {
    let env = TestEnv::new("ct-ticket-race").await;
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    let long = Duration::from_secs(30);
    let wait = Duration::from_millis(300);
    let lazy = ordered_on(&env, client(), long, wait, false);
    let victim = lazy.begin();
    lock(&victim, &env.table, "k").await.unwrap();
    let victim_id = victim.id().clone();
    // The victim meets contention elsewhere: it takes a ticket from the counter (one ADD) ...
    let out = env
        .client
        .update_item()
        .table_name(env.manager.transactions_table())
        .key("_TxId", s("~ticket-counter"))
        .key("_TxN", n(0))
        .update_expression("ADD #k :one")
        .expression_attribute_names("#k", "_TxK")
        .expression_attribute_values(":one", n(1))
        .return_values(aws_sdk_dynamodb::types::ReturnValue::UpdatedNew)
        .send()
        .await
        .unwrap();
    let older: u64 = out.attributes.unwrap()["_TxK"]
        .as_n()
        .unwrap()
        .parse()
        .unwrap();
    // ... and records it (`_TxK = if_not_exists(_TxK, t)`, with a touch, as `set_ticket` does)
    // only when the contender has read its record and is about to wound it.
    let (hook, recorded) = before_the_wound(&env, async move |m: TransactionManager| {
        client()
            .update_item()
            .table_name(m.transactions_table())
            .key("_TxId", s(victim_id.as_str()))
            .key("_TxN", n(0))
            .update_expression("SET #d = :now, #k = if_not_exists(#k, :t)")
            .condition_expression("#s = :p")
            .expression_attribute_names("#d", "_TxD")
            .expression_attribute_names("#k", "_TxK")
            .expression_attribute_names("#s", "_TxS")
            .expression_attribute_values(":now", n(now_ms()))
            .expression_attribute_values(":t", n(older))
            .expression_attribute_values(":p", s("P"))
            .send()
            .await
            .map(|_| ())
    });
    let contender_mgr = ordered_on(
        &env,
        client_with(vec![shared(hook.clone())]),
        long,
        wait,
        false,
    );
    let contender = contender_mgr.begin();
    let r = lock(&contender, &env.table, "k").await;
    assert!(hook.ran(), "the race was staged");
    recorded.lock().unwrap().take().unwrap().unwrap();
    let err = r.unwrap_err();
    assert!(matches!(err, Error::ItemLocked { .. }), "{err:?}");
    assert_eq!(ticket_of(&env, victim.id()).await, older);
    assert!(older < ticket_of(&env, contender.id()).await);
    assert_eq!(
        env.tx_state(victim.id()).await,
        Some((TxState::Pending, false)),
        "the older victim was not rolled back"
    );
    contender.rollback().await.unwrap();
    holder_commits(&env, victim, false).await;
}

/// Finding 3 (wound): the contender decided to roll back a younger holder, but is itself rolled
/// back (by an older transaction or the sweeper) before its wound is sent. A rolled-back
/// transaction decides nothing: the holder stays pending and commits; the contender learns that
/// it was rolled back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wounder_rolled_back_before_its_wound_rolls_back_nobody() {
    let env = TestEnv::new("ct-wounder-gone").await;
    for k in ["k", "c"] {
        env.raw_put(&env.table, item(&[("Id", s(k)), ("v", n(1))]))
            .await;
    }
    let long = Duration::from_secs(30);
    let wait = Duration::from_millis(300);
    // The wounder's id, known once it begins (its coordinator's client carries the hook).
    let wounder_id = std::sync::Arc::new(std::sync::Mutex::new(None::<TxId>));
    let wid = wounder_id.clone();
    let (hook, rolled) = before_the_wound(&env, async move |m: TransactionManager| {
        let id = wid.lock().unwrap().clone().unwrap();
        m.rollback_transaction(&id).await
    });
    let wounder_mgr = ordered_on(
        &env,
        client_with(vec![shared(hook.clone())]),
        long,
        wait,
        true,
    );
    // The wounder begins first (older ticket) and locks "c"; the holder, younger, locks "k".
    let wounder = wounder_mgr.begin();
    *wounder_id.lock().unwrap() = Some(wounder.id().clone());
    lock(&wounder, &env.table, "c").await.unwrap();
    let m = ordered_on(&env, client(), long, wait, true);
    let holder = m.begin();
    lock(&holder, &env.table, "k").await.unwrap();
    assert!(ticket_of(&env, wounder.id()).await < ticket_of(&env, holder.id()).await);

    let r = lock(&wounder, &env.table, "k").await;
    assert!(hook.ran(), "the race was staged");
    rolled.lock().unwrap().take().unwrap().unwrap();
    let err = r.unwrap_err();
    assert!(
        err.is_rolled_back(),
        "the wounder learns it was rolled back: {err:?}"
    );
    assert_eq!(
        env.tx_state(wounder.id()).await,
        Some((TxState::RolledBack, true))
    );
    assert_eq!(
        env.tx_state(holder.id()).await,
        Some((TxState::Pending, false)),
        "the rolled-back wounder's wound did not land"
    );
    assert_eq!(
        env.raw_get(&env.table, &key("c")).await.unwrap(),
        item(&[("Id", s("c")), ("v", n(1))]),
        "no lock left on c"
    );
    holder_commits(&env, holder, false).await;
}
