//! A waiter that gives up for good takes its entry off the item's queue (when the item is free),
//! or withdraws it in the record of the item's holder (whose unlock then leaves it out), so that
//! the transactions behind it need not wait for the entry to expire: after `rollback` of a handle,
//! after `run`'s first and last attempts (a retry takes a place in the retries' class), and after
//! a dropped handle's background rollback. Asserted on the item's queue attributes and the
//! holder's registrations.

use dynamodb_transactions::fault::{FaultInjector, FaultMode};

use super::*;

/// An unlocked item `k` whose queue holds an older live entry (ticket 0), which refuses every
/// newcomer: each joins the queue behind it.
async fn behind_an_older_entry(env: &TestEnv) {
    env.raw_put(&env.table, queued_item("k", &[(0, now_ms() + 600_000)], 1))
        .await;
}

async fn queue_on_k(env: &TestEnv) -> Vec<u64> {
    queue_of(&env.client, &env.table).await
}

/// `w` asks for `k` and gives up (`ItemLocked`, its lock wait over); returns its ticket.
async fn gives_up_on_k(env: &TestEnv, w: &dynamodb_transactions::Transaction, label: &str) -> u64 {
    let err = lock(w, &env.table, "k").await.unwrap_err();
    assert!(is_locked_out(&err), "{label}: {err:?}");
    ticket_of(env, w.id()).await
}

async fn queue_of(client: &aws_sdk_dynamodb::Client, table: &str) -> Vec<u64> {
    let got = client
        .get_item()
        .table_name(table)
        .key("Id", s("k"))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    ticket_keys(got.item().unwrap())
}

#[tokio::test]
async fn a_rolled_back_waiter_takes_its_entry_off_the_free_item() {
    let env = TestEnv::new("ct-fifo-left").await;
    behind_an_older_entry(&env).await;
    let m = fifo(&env, true, Duration::from_millis(300));
    let w = m.begin();
    let mine = gives_up_on_k(&env, &w, "").await;
    assert_eq!(queue_on_k(&env).await, vec![0, mine], "joined");
    w.rollback().await.unwrap();
    let raw = env.raw_get(&env.table, &key("k")).await.unwrap();
    assert_eq!(ticket_keys(&raw), vec![0], "left: {raw:?}");
    assert_eq!(raw["_TxQF"].as_m().unwrap()["t"], n(0), "{raw:?}");
    assert_eq!(raw["v"], n(1));
    assert!(!raw.contains_key("_TxId"), "{raw:?}");
}

#[tokio::test]
async fn a_retry_takes_its_place_in_the_retries_class_and_leaves_it_after_the_last() {
    let env = TestEnv::new("ct-fifo-left-run").await;
    behind_an_older_entry(&env).await;
    let m = fifo_tuned(&env, client(), true, Duration::from_millis(300), |s| {
        s.run_attempts = 2;
        // The closure runs in both attempts (not the retry's relock of `k` before it).
        s.run_relocks_reads = false;
    });
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (raw, seen2) = (env.client.clone(), seen.clone());
    let table = env.table.clone();
    let err = m
        .run(async move |tx| {
            let r = lock(tx, &table, "k").await;
            // What the item's queue holds once this attempt joined it.
            let q = queue_of(&raw, &table).await;
            seen2.lock().unwrap().push(q);
            r
        })
        .await
        .unwrap_err();
    assert!(is_locked_out(&err), "{err:?}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    // The first attempt joined behind the older entry; the retry left that place (the item was
    // free) and joined again with the unit of work's ticket in the retries' class: the same
    // ticket without its top bit, still behind the entry of ticket 0.
    let first = seen[0][1];
    assert_eq!(seen[0], vec![0, first], "{seen:?}");
    assert!(first >= 1 << 63, "a first attempt's class: {seen:?}");
    assert_eq!(seen[1], vec![0, first - (1 << 63)], "{seen:?}");
    assert_eq!(
        queue_on_k(&env).await,
        vec![0],
        "and run left it at the end"
    );
}

#[tokio::test]
async fn a_dropped_waiter_takes_its_entry_off_in_the_background() {
    let env = TestEnv::new("ct-fifo-left-drop").await;
    behind_an_older_entry(&env).await;
    let m = fifo_tuned(&env, client(), true, Duration::from_millis(300), |s| {
        s.rollback_on_drop = true
    });
    let w = m.begin();
    let err = lock(&w, &env.table, "k").await.unwrap_err();
    assert!(is_locked_out(&err), "{err:?}");
    assert_eq!(queue_on_k(&env).await.len(), 2, "joined");
    drop(w);
    let mut left = false;
    for _ in 0..100 {
        if queue_on_k(&env).await == vec![0] {
            left = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(left, "{:?}", queue_on_k(&env).await);
}

/// The lock wait of a waiter that must register with the holder (or join the item's queue)
/// before it gives up: a few round trips, with room for a loaded machine.
const REGISTER_WAIT: Duration = Duration::from_secs(1);

/// A waiter registered with the holder of `k` gives up: its registration becomes a withdrawal,
/// and the holder's commit leaves its entry out of the queue it writes on `k`.
#[tokio::test]
async fn a_waiter_giving_up_on_a_locked_item_withdraws_its_registration() {
    let env = TestEnv::new("ct-fifo-withdraw").await;
    let m = fifo(&env, true, REGISTER_WAIT);
    let holder = crate::held_by(&env, &m, "k").await;
    let w = m.begin();
    let mine = gives_up_on_k(&env, &w, "").await;
    let registered = registrations(&header(&env, holder.id()).await);
    assert!(
        matches!(registered.as_slice(), [(t, e)] if *t == mine && *e > now_ms()),
        "registered: {registered:?}"
    );
    w.rollback().await.unwrap();
    assert_eq!(
        registrations(&header(&env, holder.id()).await),
        vec![(mine, 0)],
        "withdrawn"
    );
    holder.commit().await.unwrap();
    let raw = env.raw_get(&env.table, &key("k")).await.unwrap();
    assert_eq!(ticket_keys(&raw), Vec::<u64>::new(), "{raw:?}");
    assert_eq!(raw["v"], n(2));
    assert!(!raw.contains_key("_TxId"), "{raw:?}");
}

/// The item carries the waiter's entry (it joined the free item's queue) when an older
/// transaction locks it; the waiter gives up: it withdraws the entry in the holder's record, and
/// the holder's commit leaves it out of the queue it writes back.
#[tokio::test]
async fn a_waiter_giving_up_on_a_locked_item_that_carries_its_entry_withdraws_it() {
    let env = TestEnv::new("ct-fifo-withdraw-carried").await;
    behind_an_older_entry(&env).await;
    env.raw_put(&env.table, item(&[("Id", s("o")), ("v", n(1))]))
        .await;
    let m = fifo(&env, true, REGISTER_WAIT);
    // The holder's record (and ticket) first: older than the waiter.
    let holder = m.begin();
    lock(&holder, &env.table, "o").await.unwrap();
    let w = m.begin();
    let mine = gives_up_on_k(&env, &w, "").await;
    assert_eq!(queue_on_k(&env).await, vec![0, mine], "joined");
    // Entry 0 expires: the holder, older than the waiter, takes `k` with its queue.
    expire_oldest_entry(&env, &env.table, "k").await;
    lock(&holder, &env.table, "k").await.unwrap();
    w.rollback().await.unwrap();
    assert_eq!(
        registrations(&header(&env, holder.id()).await),
        vec![(mine, 0)],
        "withdrawn"
    );
    holder.commit().await.unwrap();
    let raw = env.raw_get(&env.table, &key("k")).await.unwrap();
    assert!(!ticket_keys(&raw).contains(&mine), "{raw:?}");
    assert!(!raw.contains_key("_TxId"), "{raw:?}");
}

/// A waiter registered with the holder of `k` gives up, and dies at each request of its rollback
/// and its leaving in turn (before the request, or after it landed with its answer lost): the
/// holder still commits, and its unlock leaves the entry out exactly when the withdrawal landed
/// (otherwise the entry stays until it expires, as a registration).
async fn giving_up_and_dying_at_every_request(mode: FaultMode, prefix: &str) {
    let env = TestEnv::new(prefix).await;
    let m = fifo(&env, true, Duration::from_millis(300));
    let faults = FaultInjector::new();
    let waiters = fifo_on(
        &env,
        client_with(vec![shared(faults.clone())]),
        true,
        REGISTER_WAIT,
    );
    let (mut withdrawn_runs, mut kept_runs) = (0, 0);
    for k in 1..=12 {
        let label = format!("{mode:?} at request {k}");
        let holder = crate::held_by(&env, &m, "k").await;
        let w = waiters.begin();
        let mine = gives_up_on_k(&env, &w, &label).await;

        faults.crash_at(k, mode);
        let _ = w.rollback().await;
        let struck = faults.struck();
        faults.disarm();
        let registered = registrations(&header(&env, holder.id()).await);
        let withdrawn = registered.contains(&(mine, 0));
        holder
            .commit()
            .await
            .unwrap_or_else(|e| panic!("{label}: holder: {e}"));
        let raw = env.raw_get(&env.table, &key("k")).await.unwrap();
        assert_eq!(raw["v"], n(2), "{label}: {raw:?}");
        assert!(!raw.contains_key("_TxId"), "{label}: {raw:?}");
        assert_eq!(
            ticket_keys(&raw).contains(&mine),
            !withdrawn,
            "{label}: registrations {registered:?}, item {raw:?}"
        );
        if withdrawn {
            withdrawn_runs += 1;
        } else {
            kept_runs += 1;
        }
        if !struck {
            // The rollback and the leaving sent fewer than `k` requests: all of them went through.
            assert!(withdrawn, "{label}: nothing failed, yet not withdrawn");
            break;
        }
    }
    assert!(
        withdrawn_runs > 0 && kept_runs > 0,
        "{withdrawn_runs} {kept_runs}"
    );
}

#[tokio::test]
async fn a_waiter_dying_before_any_request_of_its_leaving_leaves_a_consistent_queue() {
    giving_up_and_dying_at_every_request(FaultMode::BeforeSend, "ct-fifo-withdraw-before").await;
}

#[tokio::test]
async fn a_waiter_dying_after_any_request_of_its_leaving_landed_leaves_a_consistent_queue() {
    giving_up_and_dying_at_every_request(FaultMode::AfterSend, "ct-fifo-withdraw-after").await;
}
