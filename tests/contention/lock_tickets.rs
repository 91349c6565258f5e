//! Locks carrying their holder's recorded ticket (`_TxKR`): a handle that knows the ticket its
//! record holds writes it on the locks it takes, and a waiter meeting such a lock judges how the
//! holder compares with it without reading the holder's record (docs/PROTOCOL.md "Judged by the
//! lock's ticket"). Every unlock removes it.
use super::*;
use dynamodb_transactions::fault::{FaultMode, RequestCounter};

/// Record reads (`GetItem`, `BatchGetItem`) among the requests `counter` saw.
fn record_reads(counter: &RequestCounter) -> u64 {
    counter.get("GetItem") + counter.get("BatchGetItem")
}

/// The recorded ticket the lock on `k` carries, if any.
async fn lock_ticket_on(env: &TestEnv, k: &str) -> Option<u64> {
    let raw = env.raw_get(&env.table, &key(k)).await.unwrap();
    raw.get("_TxKR").map(|t| t.as_n().unwrap().parse().unwrap())
}

/// `k` holds `v` and no lock attribute.
async fn settled(env: &TestEnv, k: &str, v: u64) {
    let raw = env.raw_get(&env.table, &key(k)).await.unwrap();
    assert_eq!(raw["v"], n(v), "{raw:?}");
    assert!(!has_tx_attrs(&raw), "{raw:?}");
}

/// An older holder's lock carries its record's ticket; a younger waiter meeting it waits without
/// reading the holder's record (or its own), and gives up with `ItemLocked` once its lock wait is
/// over. The holder's commit (its lock's final write) removes the ticket with the lock. On the
/// code before, the waiter read the holder's record with its own at its first look.
#[tokio::test]
async fn a_waiter_judges_an_older_holder_by_its_locks_ticket_without_reading_its_record() {
    let env = TestEnv::new("ct-lockticket-older").await;
    let m = ordered_on(&env, client(), |_| {});
    let holder = held_by(&env, &m, "k").await;
    let t = ticket_of(&env, holder.id()).await;
    assert_eq!(
        lock_ticket_on(&env, "k").await,
        Some(t),
        "the lock carries it"
    );

    let counter = RequestCounter::new();
    let w = ordered_on(&env, client_with(vec![shared(counter.clone())]), |s| {
        s.lock_wait = Duration::from_millis(500);
        // The lock's judgement stands for a fifth of the grace (2 s): the whole wait.
        s.wound_grace = Duration::from_secs(10);
    });
    let waiter = w.begin();
    let read = lock(&waiter, &env.table, "k").await;
    assert!(matches!(read, Err(Error::ItemLocked { .. })), "{read:?}");
    assert!(
        ticket_of(&env, waiter.id()).await > t,
        "the waiter is younger"
    );
    let sent = counter.snapshot();
    assert_eq!(record_reads(&counter), 0, "it read a record: {sent:?}");
    assert!(counter.get("UpdateItem") >= 3, "it looked again: {sent:?}");
    waiter.rollback().await.unwrap();

    holder.commit().await.unwrap();
    settled(&env, "k", 2).await;
}

/// A younger holder met by a waiter holding nothing: judged by its lock's ticket, it is given its
/// grace without a read of its record. The holder locks the item (in a hook) just before the
/// waiter's first lock attempt goes out, after the waiter took the older ticket; it commits a
/// moment later, within the fifth of the grace the lock's judgement stands, and the waiter takes
/// the item having read no record. On the code before, it read the holder's record with its own.
#[tokio::test]
async fn a_waiter_holding_nothing_gives_a_younger_holder_its_grace_by_its_locks_ticket() {
    let env = TestEnv::new("ct-lockticket-younger").await;
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    // Just before the waiter's first lock attempt goes out, a holder with a ticket at begin
    // (younger than the waiter's, taken for its record before the attempt) locks the item.
    let table = env.table.clone();
    let (hook, held) = run_before_with(
        &env,
        "UpdateItem",
        &format!("\"TableName\":\"{}\"", env.table),
        |s| {
            s.contention = ContentionPolicy::Ordered {
                dead_after: Duration::from_secs(30),
                ticket_at_begin: true,
            }
        },
        async move |m: TransactionManager| {
            let h = m.begin();
            lock(&h, &table, "k").await.unwrap();
            h.id().clone()
        },
    );
    let counter = RequestCounter::new();
    let w = ordered_on(
        &env,
        client_with(vec![shared(hook.clone()), shared(counter.clone())]),
        // A long grace: its fifth (2 s), while the lock's judgement stands, lasts well past the
        // holder's commit even on a loaded machine.
        |s| s.wound_grace = Duration::from_secs(10),
    );
    let waiter = w.begin();
    let holder_commits = async {
        let id = loop {
            if let Some(id) = held.lock().unwrap().clone() {
                break id;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let t = ticket_of(&env, &id).await;
        let carried = lock_ticket_on(&env, "k").await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        env.manager
            .resume(&id)
            .await
            .unwrap()
            .commit()
            .await
            .unwrap();
        (id, t, carried)
    };
    // The waiter's read returns the value 1 and leaves its lock on the item.
    let ((), (holder, t, carried)) = tokio::join!(reads_and_locks_k(&env, &waiter), holder_commits);
    assert!(hook.ran(), "the holder locked first");
    assert_eq!(carried, Some(t), "the holder's lock carries its ticket");
    assert!(
        ticket_of(&env, waiter.id()).await < t,
        "the holder is younger"
    );
    let sent = counter.snapshot();
    assert_eq!(record_reads(&counter), 0, "it read a record: {sent:?}");
    assert_eq!(
        env.tx_state(&holder).await.map(|s| s.0),
        Some(dynamodb_transactions::TxState::Committed)
    );
    waiter.commit().await.unwrap();
    settled(&env, "k", 1).await;
}

/// An older holder decided since (its rollback's decision landed, its coordinator stopped before
/// releasing the item): a waiter judging it by its lock's ticket reads its record once that
/// judgement stops standing (a fifth of the grace), completes it and takes the item.
#[tokio::test]
async fn an_older_holder_decided_since_is_completed_once_its_locks_judgement_stops_standing() {
    let env = TestEnv::with_settings("ct-lockticket-decided", |s| {
        s.rollback_on_drop = false;
        s.contention = ContentionPolicy::Ordered {
            dead_after: Duration::from_secs(30),
            ticket_at_begin: true,
        };
    })
    .await;
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    let holder = env.manager.begin();
    let id = holder.id().clone();
    lock(&holder, &env.table, "k").await.unwrap();
    set_v(&holder, &env.table, "k", 2).await.unwrap();
    assert!(lock_ticket_on(&env, "k").await.is_some());
    env.faults.crash_at(1, FaultMode::AfterSend);
    holder.rollback().await.unwrap_err();
    assert!(env.faults.struck());
    env.faults.disarm();
    assert_eq!(
        env.tx_state(&id).await.map(|s| s.0),
        Some(dynamodb_transactions::TxState::RolledBack)
    );

    let counter = RequestCounter::new();
    let w = ordered_on(&env, client_with(vec![shared(counter.clone())]), |s| {
        s.lock_wait = Duration::from_secs(10);
    });
    let waiter = w.begin();
    lock(&waiter, &env.table, "k").await.unwrap();
    assert!(record_reads(&counter) >= 1, "{:?}", counter.snapshot());
    assert!(
        lock_ticket_on(&env, "k").await.is_some(),
        "the waiter's lock"
    );
    set_v(&waiter, &env.table, "k", 3).await.unwrap();
    waiter.commit().await.unwrap();
    settled(&env, "k", 3).await;
}
