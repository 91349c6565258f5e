//! A wound decides only what was judged: a holder that moved on, recorded an older ticket, or a
//! wounder rolled back meanwhile, is never rolled back by a stale judgement.

use std::time::Duration;

use dynamodb_transactions::{ContentionPolicy, Error, TransactionManager, TxId, TxState};

use crate::common::*;
use crate::{lock, ticket_of};

/// A coordinator over the env's tables with the ordered policy, on `client`, the write-only fast
/// path off and a short grace.
fn ordered_racing(
    env: &TestEnv,
    client: aws_sdk_dynamodb::Client,
    dead_after: Duration,
    lock_wait: Duration,
    ticket_at_begin: bool,
) -> TransactionManager {
    crate::ordered_on(env, client, |s| {
        s.write_only_fast_path = false;
        s.contention = ContentionPolicy::Ordered {
            dead_after,
            ticket_at_begin,
        };
        s.lock_wait = lock_wait;
        s.wound_grace = Duration::from_millis(50);
    })
}

/// Holds the contender's wound (the request deciding the victim: it carries the placeholder
/// `:_TxTo`) until `f` has run on a fresh runtime with a fresh coordinator over `env`'s tables.
fn before_the_wound<T: Send + 'static>(
    env: &TestEnv,
    f: impl AsyncFnOnce(TransactionManager) -> T + Send + 'static,
) -> (RunBefore, std::sync::Arc<std::sync::Mutex<Option<T>>>) {
    crate::run_before(env, "*", ":_TxTo", f)
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
    let m = ordered_racing(&env, client(), dead_after, Duration::from_millis(300), true);
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
    let contender_mgr = ordered_racing(
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
    let m = ordered_racing(&env, client(), dead_after, Duration::from_millis(300), true);
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
    let contender_mgr = ordered_racing(
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
    let lazy = ordered_racing(&env, client(), long, wait, false);
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
    let contender_mgr = ordered_racing(
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
    let wounder_mgr = ordered_racing(
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
    let m = ordered_racing(&env, client(), long, wait, true);
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
