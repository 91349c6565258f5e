//! What a waiter sends at each look at a locked item.

use std::time::Duration;

use dynamodb_transactions::fault::RequestCounter;
use dynamodb_transactions::{TicketSource, TxState};

use super::*;

/// A waiter reads its own record in the same request as the holder's (one `BatchGetItem` per
/// look, no `GetItem` of its own): rolled back while it waits (here by an operator), it stops at
/// its next look, and the holder keeps the item and commits.
#[tokio::test]
async fn a_waiter_reads_its_own_record_with_the_holders_at_each_look() {
    let env = TestEnv::new("ct-look").await;
    let (m, holder) = held(&env, "k").await;

    let counter = RequestCounter::new();
    let m2 = ordered_on(&env, client_with(vec![shared(counter.clone())]), |s| {
        s.lock_wait = Duration::from_secs(20);
    });
    let waiter = m2.begin();
    let waiter_id = waiter.id().clone();
    let table = env.table.clone();
    let waiting = tokio::spawn(async move { lock(&waiter, &table, "k").await });

    // Younger, it waits for the holder: two looks that read both records.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while counter.snapshot().get("BatchGetItem").copied().unwrap_or(0) < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no look read both records: {:?}",
            counter.snapshot()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    m.rollback_transaction(&waiter_id).await.unwrap();
    let out = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter stops at its next look")
        .unwrap();
    assert!(matches!(out, Err(Error::RolledBack { .. })), "{out:?}");
    let sent = counter.snapshot();
    // At most the first look reads the holder's record alone (before the waiter's record holds
    // its ticket); no look reads the waiter's own record by itself.
    assert!(sent.get("GetItem").copied().unwrap_or(0) <= 1, "{sent:?}");

    let raw = env.raw_get(&env.table, &key("k")).await.unwrap();
    assert_eq!(raw["_TxId"], s(holder.id().as_str()), "{raw:?}");
    holder.commit().await.unwrap();
    let raw = env.raw_get(&env.table, &key("k")).await.unwrap();
    assert_eq!(raw["v"], n(2));
    assert!(!has_tx_attrs(&raw), "{raw:?}");
}

/// The race every waiter of a hot item runs at each handover: the waiter's lock attempt meets the
/// holder's lock, and the holder's commit lands before the waiter reads the holder's record. The
/// record is finalized and names the item, so the waiter's next lock attempt takes the item: it
/// does not read the item first (one `BatchGetItem`, the two records, not a second for the item).
#[tokio::test]
async fn a_holder_committed_before_its_record_is_read_costs_no_read_of_the_item() {
    let env = TestEnv::new("ct-race").await;
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    let m = ordered(&env, Duration::from_secs(30));
    let holder = m.begin();
    lock(&holder, &env.table, "k").await.unwrap();
    let holder_id = holder.id().clone();

    // Commits the holder (through a fresh coordinator) just before the waiter reads its record.
    let id = holder_id.clone();
    let (hook, _) = run_before(
        &env,
        "*",
        holder_id.as_str(),
        async move |m: TransactionManager| m.resume(&id).await.unwrap().commit().await.unwrap(),
    );
    let counter = RequestCounter::new();
    let m2 = ordered_on(
        &env,
        client_with(vec![shared(hook.clone()), shared(counter.clone())]),
        |_| {},
    );
    let waiter = m2.begin();
    reads_and_locks_k(&env, &waiter).await;
    assert!(hook.ran(), "the waiter never read the holder's record");
    let status = m.transaction_state(&holder_id).await.unwrap().unwrap();
    assert_eq!((status.state, status.finalized), (TxState::Committed, true));
    let sent = counter.snapshot();
    assert_eq!(sent.get("GetItem"), None, "{sent:?}");
    assert_eq!(sent.get("BatchGetItem"), Some(&1), "{sent:?}");
    waiter.commit().await.unwrap();
    let raw = env.raw_get(&env.table, &key("k")).await.unwrap();
    assert!(!has_tx_attrs(&raw), "{raw:?}");
}

/// A lock of a finalized holder on an item its record names can only be one sent late (landing
/// after the commit). The first meeting takes it for the commit race above and tries the lock
/// again; meeting it again, the waiter releases it and takes the item.
#[tokio::test]
async fn a_late_lock_on_an_item_the_finalized_record_names_is_released_at_the_second_meeting() {
    let env = TestEnv::new("ct-late").await;
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    let m = ordered(&env, Duration::from_secs(30));
    let holder = m.begin();
    lock(&holder, &env.table, "k").await.unwrap();
    let locked = env.raw_get(&env.table, &key("k")).await.unwrap();
    let holder_id = holder.id().clone();
    holder.commit().await.unwrap();
    // Its lock lands again, late.
    env.raw_put(&env.table, locked).await;

    let counter = RequestCounter::new();
    let m2 = ordered_on(&env, client_with(vec![shared(counter.clone())]), |_| {});
    let waiter = m2.begin();
    reads_and_locks_k(&env, &waiter).await;
    // Two looks met the late lock (each reading both records); the second read the item to
    // release it.
    let sent = counter.snapshot();
    assert_eq!(sent.get("BatchGetItem"), Some(&3), "{sent:?}");
    waiter.commit().await.unwrap();
    let status = m.transaction_state(&holder_id).await.unwrap().unwrap();
    assert_eq!((status.state, status.finalized), (TxState::Committed, true));
    let raw = env.raw_get(&env.table, &key("k")).await.unwrap();
    assert_eq!(raw["v"], n(1));
    assert!(!has_tx_attrs(&raw), "{raw:?}");
}

/// Waiting in ticket order for an older holder, a waiter stands by its judgement for a second at a
/// time: its looks only try the lock, and the holder's record (with its own) is read about once a
/// second, not at every look. The holder's commit still hands it the item.
#[tokio::test]
async fn a_paced_waiter_reads_an_older_holders_record_about_once_a_second() {
    let env = TestEnv::new("ct-older").await;
    let (_m, holder) = held(&env, "k").await;

    let counter = RequestCounter::new();
    let m2 = ordered_on(&env, client_with(vec![shared(counter.clone())]), |s| {
        s.ticket_source = TicketSource::Counter;
        s.wait_in_ticket_order = true;
        s.lock_wait = Duration::from_secs(20);
    });
    let waiter = m2.begin();
    let table = env.table.clone();
    let waiting = async {
        waiter
            .get_item()
            .table_name(&table)
            .key("Id", s("k"))
            .send()
            .await
    };
    let committing = async {
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let sent = counter.snapshot();
        holder.commit().await.unwrap();
        sent
    };
    let (read, sent) = tokio::join!(waiting, committing);
    // Looks every few tens of ms for 2.5 s; reads of the records at about 0, 1 and 2 s (the
    // holder's with ours, or ours alone: the waiter holds no other lock).
    let reads = ["BatchGetItem", "GetItem"].map(|op| sent.get(op).copied().unwrap_or(0));
    assert!(
        sent.get("UpdateItem").copied().unwrap_or(0) >= 5,
        "{sent:?}"
    );
    assert!(reads[0] <= 4 && reads[1] <= 4, "{sent:?}");
    assert_eq!(read.unwrap().item().unwrap()["v"], n(2));
    let raw = env.raw_get(&env.table, &key("k")).await.unwrap();
    assert_eq!(raw["_TxId"], s(waiter.id().as_str()), "{raw:?}");
    waiter.commit().await.unwrap();
    let raw = env.raw_get(&env.table, &key("k")).await.unwrap();
    assert_eq!(raw, item(&[("Id", s("k")), ("v", n(2))]));
}

/// An older transaction holding no lock (a retry, here), meeting a younger running holder, gives
/// it its grace, reading the holder's record at most every 100 ms of it (the holder may start
/// waiting meanwhile), not at every look; once the grace is over it rolls the holder back and
/// takes the item.
#[tokio::test]
async fn an_older_waiter_reads_a_running_holders_record_a_few_times_per_grace() {
    let env = TestEnv::new("ct-grace").await;
    let (_m, younger) = held(&env, "x").await;

    let counter = RequestCounter::new();
    let m_older = ordered_on(&env, client_with(vec![shared(counter.clone())]), |s| {
        s.ticket_source = TicketSource::Counter;
        s.wound_grace = Duration::from_secs(1);
        s.lock_wait = Duration::from_secs(10);
    });
    let attempts = std::sync::atomic::AtomicU32::new(0);
    let reads = std::sync::Mutex::new(None);
    let table = env.table.clone();
    m_older
        .run(async |tx| {
            // The first attempt gives up at once: the retry, older than every first attempt,
            // holds nothing when it meets the younger's lock.
            if attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                return Err(Error::RolledBack {
                    tx_id: tx.id().clone(),
                });
            }
            let before = counter.snapshot().get("BatchGetItem").copied().unwrap_or(0);
            let read = lock_and_read_v(tx, &table).await?;
            let sent = counter.snapshot();
            *reads.lock().unwrap() = Some((sent.clone(), before, read));
            set_v(tx, &table, "x", read + 10).await?;
            Ok(())
        })
        .await
        .unwrap();
    let (sent, before, read) = reads.lock().unwrap().take().unwrap();
    // About ten judgements in the grace, the last one's wound, and its completion's reads.
    let reads = sent.get("BatchGetItem").copied().unwrap_or(0) - before;
    assert!(reads <= 20, "{reads} reads: {sent:?}");
    // Its looks went on meanwhile (a few dozen a second, fewer on a loaded machine).
    assert!(
        sent.get("UpdateItem").copied().unwrap_or(0) >= 10,
        "{sent:?}"
    );
    assert_eq!(read, 1, "the younger's write was rolled back");
    assert_eq!(
        env.tx_state(younger.id()).await.unwrap().0,
        TxState::RolledBack
    );
    let raw = env.raw_get(&env.table, &key("x")).await.unwrap();
    assert_eq!(raw, item(&[("Id", s("x")), ("v", n(11))]));
}

/// `x`'s `v`, read by `tx` (which locks it).
async fn lock_and_read_v(
    tx: &dynamodb_transactions::Transaction,
    table: &str,
) -> Result<u64, Error> {
    let out = tx
        .get_item()
        .table_name(table)
        .key("Id", s("x"))
        .send()
        .await?;
    Ok(out.item().unwrap()["v"].as_n().unwrap().parse().unwrap())
}

/// `k` put with `v` 1, then locked and set to 2 (buffered) by a transaction of an [`ordered`]
/// manager (tickets taken as transactions begin), returned with it.
async fn held(
    env: &TestEnv,
    k: &str,
) -> (
    dynamodb_transactions::TransactionManager,
    dynamodb_transactions::Transaction,
) {
    let m = ordered(env, Duration::from_secs(30));
    let holder = held_by(env, &m, k).await;
    (m, holder)
}

/// A waiter holding another item records what it waits for; rolled back (here by an operator)
/// just before the look that takes the item, it learns so as it clears that wait (a write
/// conditional on its record pending, which it sends anyway): the read reports `RolledBack` at
/// once instead of handing the item to the caller, and the lock it took late is released.
#[tokio::test]
async fn a_waiter_rolled_back_before_the_look_that_takes_the_item_learns_it_as_it_clears_its_wait()
{
    let env = TestEnv::new("ct-look-late").await;
    for k in ["k", "c"] {
        env.raw_put(&env.table, item(&[("Id", s(k)), ("v", n(1))]))
            .await;
    }
    let m = ordered(&env, Duration::from_secs(30));
    let holder = m.begin();
    lock(&holder, &env.table, "k").await.unwrap();
    let holder_id = holder.id().clone();

    // Filled in once the waiter waits: the hook rolls it back and commits the holder.
    let waiter_id: std::sync::Arc<std::sync::Mutex<Option<dynamodb_transactions::TxId>>> =
        Default::default();
    let (victim, id) = (waiter_id.clone(), holder_id.clone());
    // Armed below, once the waiter waits (no request contains the text it starts with).
    let (hook, _) = run_before(
        &env,
        "UpdateItem",
        "\"armed below\"",
        async move |m: TransactionManager| {
            let waiter = victim.lock().unwrap().clone().unwrap();
            m.rollback_transaction(&waiter).await.unwrap();
            m.resume(&id).await.unwrap().commit().await.unwrap();
        },
    );
    let m2 = ordered_on(&env, client_with(vec![shared(hook.clone())]), |s| {
        s.lock_wait = Duration::from_secs(20);
    });
    let waiter = m2.begin();
    lock(&waiter, &env.table, "c").await.unwrap();
    *waiter_id.lock().unwrap() = Some(waiter.id().clone());
    let record = item(&[("_TxId", s(waiter.id().as_str())), ("_TxN", n(0))]);
    let arm = async {
        // Younger, holding `c` (below `k`: a read above it would be released while it waits),
        // it waits for the holder and records so.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let raw = env
                .raw_get(env.manager.transactions_table(), &record)
                .await
                .unwrap();
            if raw.contains_key("_TxW") {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "no recorded wait");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Its next lock attempt at `k`.
        hook.arm(&[
            waiter.id().as_str(),
            &format!("\"TableName\":\"{}\"", env.table),
            "{\"S\":\"k\"}",
        ]);
    };
    let (read, ()) = tokio::join!(lock(&waiter, &env.table, "k"), arm);
    assert!(hook.ran(), "the hook never ran");
    assert!(matches!(read, Err(Error::RolledBack { .. })), "{read:?}");
    assert_eq!(
        m.transaction_state(&holder_id)
            .await
            .unwrap()
            .unwrap()
            .state,
        TxState::Committed
    );
    // Neither item stays locked: `c` released by the rollback, `k` by the waiter itself.
    for k in ["k", "c"] {
        let raw = env.raw_get(&env.table, &key(k)).await.unwrap();
        assert_eq!(raw, item(&[("Id", s(k)), ("v", n(1))]), "{k}");
    }
    let err = waiter.commit().await.unwrap_err();
    assert!(matches!(err, Error::RolledBack { .. }), "{err:?}");
}
