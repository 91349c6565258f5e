//! `Settings::record_on_demand`: a holder whose lock went out without a record is judged by the
//! ticket its lock carries (`_TxK`), as a record's ticket would judge it: an older one is waited
//! for, one left for dead (its lock `dead_after` old) is released, a younger one gets its grace
//! and is then rolled back under a tombstone.
use std::time::Duration;

use super::record_on_demand::{finish_crashed, increment, on_demand, owner, v};
use super::*;
use dynamodb_transactions::fault::{FaultMode, RequestCounter};
use dynamodb_transactions::{ContentionPolicy, Error, Settings, TxState};

const GRACE: Duration = Duration::from_millis(100);

/// A lock without record, a short grace, and a ticket taken before the first lock goes out.
fn ticket_first(s: &mut Settings, dead_after: Duration) {
    on_demand(s);
    s.wound_grace = GRACE;
    s.contention = ContentionPolicy::Ordered {
        dead_after,
        ticket_at_begin: true,
    };
}

async fn env(prefix: &str, dead_after: Duration) -> TestEnv {
    let env = TestEnv::with_settings(prefix, |s| ticket_first(s, dead_after)).await;
    seed(&env, &["a", "b"]).await;
    warm(&env).await;
    env
}

/// The ticket the lock on `id` carries.
async fn lock_ticket(env: &TestEnv, id: &str) -> Option<String> {
    env.raw_get(&env.table, &key(id))
        .await
        .unwrap()
        .get("_TxK")
        .map(|t| t.as_n().unwrap().clone())
}

#[tokio::test]
async fn an_older_holder_without_record_is_waited_for_past_its_grace() {
    let env = env("unrec-older", Duration::from_secs(10)).await;
    let holder = env.manager.begin();
    let id = holder.id().clone();
    increment(&holder, &env.table, "a").await.unwrap();
    assert!(header_row(&env, &id).await.is_none(), "no record");
    let ticket = lock_ticket(&env, "a")
        .await
        .expect("the lock carries a ticket");
    assert_ne!(ticket, "0");

    // A younger transaction (its ticket taken after the holder's) increments `a` meanwhile.
    let m2 = coordinator_with(&env, |s| ticket_first(s, Duration::from_secs(10)));
    let waiter = m2.run(async |tx| increment(tx, &env.table, "a").await.map(|_| ()));
    let holder_ends = async {
        // Well past the grace, the holder still holds `a` and commits.
        tokio::time::sleep(GRACE * 4).await;
        assert_eq!(owner(&env, "a").await.as_deref(), Some(id.as_str()));
        holder.commit().await
    };
    let (waited, committed) = tokio::join!(waiter, holder_ends);
    committed.unwrap();
    waited.unwrap();
    assert!(header_row(&env, &id).await.is_none(), "no tombstone");
    assert_eq!(v(&env, "a").await, n(3), "both increments counted");
    assert_clean(&env).await;
}

#[tokio::test]
async fn an_older_holder_left_for_dead_is_released_once_its_lock_is_dead_after_old() {
    let dead_after = Duration::from_millis(800);
    let env = env("unrec-dead", dead_after).await;
    let holder = env.manager.begin();
    let id = holder.id().clone();
    increment(&holder, &env.table, "a").await.unwrap();
    holder.abandon();
    let m2 = coordinator_with(&env, |s| ticket_first(s, dead_after));
    m2.run(async |tx| increment(tx, &env.table, "a").await.map(|_| ()))
        .await
        .unwrap();
    let stone = header_row(&env, &id).await.expect("a tombstone");
    assert!(stone.contains_key("_TxX"), "{stone:?}");
    assert_eq!(v(&env, "a").await, n(2), "only the waiter's increment");
    assert_clean(&env).await;
}

/// The holder of `a` was rolled back under a tombstone, the older transaction incremented `a` and
/// `b` (each 2 now).
async fn holder_was_tombstoned(env: &TestEnv, holder: dynamodb_transactions::Transaction) {
    let id = holder.id().clone();
    let stone = header_row(env, &id).await.expect("a tombstone");
    assert!(stone.contains_key("_TxX"), "{stone:?}");
    let err = holder.commit().await.unwrap_err();
    assert!(matches!(err, Error::RolledBack { .. }), "{err:?}");
    assert_eq!((v(env, "a").await, v(env, "b").await), (n(2), n(2)));
    assert_clean(env).await;
}

#[tokio::test]
async fn a_younger_holder_without_record_is_rolled_back_after_its_grace() {
    let env = env("unrec-younger", Duration::from_secs(10)).await;
    // The older transaction reads `b` first (its ticket goes out with that lock).
    let older = env.manager.begin();
    let older_id = older.id().clone();
    increment(&older, &env.table, "b").await.unwrap();
    let holder = env.manager.begin();
    increment(&holder, &env.table, "a").await.unwrap();
    let (theirs, mine) = (lock_ticket(&env, "a").await, lock_ticket(&env, "b").await);
    let (theirs, mine): (u64, u64) = (
        theirs.unwrap().parse().unwrap(),
        mine.unwrap().parse().unwrap(),
    );
    assert!(mine < theirs, "the older transaction's ticket is smaller");
    // Its second read creates its record and meets the younger holder: a grace, then a wound.
    increment(&older, &env.table, "a").await.unwrap();
    older.commit().await.unwrap();
    assert_eq!(
        env.tx_state(&older_id).await.map(|s| s.0),
        Some(TxState::Committed)
    );
    holder_was_tombstoned(&env, holder).await;
}

/// A waiter that asked for no other lock judges an older holder without record by its lock alone
/// for a fifth of the grace: it reads no record meanwhile.
#[tokio::test]
async fn a_waiter_holding_nothing_reads_no_record_while_the_locks_judgement_stands() {
    // A long grace, so that the lock's judgement stands (2 s) well past the holder's commit even
    // on a loaded machine.
    let grace = Duration::from_secs(10);
    let patient = move |s: &mut Settings| {
        ticket_first(s, Duration::from_secs(10));
        s.wound_grace = grace;
    };
    let env = TestEnv::with_settings("unrec-quiet", patient).await;
    seed(&env, &["a"]).await;
    warm(&env).await;
    let holder = env.manager.begin();
    increment(&holder, &env.table, "a").await.unwrap();

    let counter = RequestCounter::new();
    let m2 = coordinator_on(&env, client_with(vec![shared(counter.clone())]), patient);
    m2.get_item()
        .table_name(&env.table)
        .key("Id", s("warm"))
        .send()
        .await
        .unwrap();
    counter.reset();
    let waiter = m2.run(async |tx| increment(tx, &env.table, "a").await.map(|_| ()));
    let holder_ends = async {
        // Released well within a fifth of the grace.
        tokio::time::sleep(Duration::from_millis(100)).await;
        holder.commit().await
    };
    let (waited, committed) = tokio::join!(waiter, holder_ends);
    committed.unwrap();
    waited.unwrap();
    let c = counter.snapshot();
    assert!(
        c.get("UpdateItem").is_some_and(|&n| n >= 3),
        "the ticket, the lock attempts and the commit: {c:?}"
    );
    assert_eq!(c.get("GetItem"), None, "{c:?}");
    assert_eq!(c.get("BatchGetItem"), None, "{c:?}");
    assert_eq!(v(&env, "a").await, n(3));
    assert_clean(&env).await;
}

/// An older holder whose lock went out without a record, decided since (its record created by a
/// second read, then rolled back by a coordinator that stopped before releasing its items): a
/// waiter reads its record once the lock's judgement stops standing, and releases the item.
#[tokio::test]
async fn a_decided_holder_met_by_its_lock_without_record_is_released_after_the_grace() {
    let env = env("unrec-decided", Duration::from_secs(10)).await;
    let holder = env.manager.begin();
    let id = holder.id().clone();
    increment(&holder, &env.table, "a").await.unwrap();
    increment(&holder, &env.table, "b").await.unwrap();
    assert!(
        header_row(&env, &id).await.is_some(),
        "created by the second read"
    );
    assert!(lock_ticket(&env, "a").await.is_some());
    // The rollback's decision lands; its coordinator stops there.
    env.faults
        .crash_at(1, dynamodb_transactions::fault::FaultMode::AfterSend);
    holder.rollback().await.unwrap_err();
    assert!(env.faults.struck());
    env.faults.disarm();
    assert_eq!(
        env.tx_state(&id).await.map(|s| s.0),
        Some(TxState::RolledBack)
    );
    assert_eq!(owner(&env, "a").await.as_deref(), Some(id.as_str()));

    let m2 = coordinator_with(&env, |s| ticket_first(s, Duration::from_secs(10)));
    m2.run(async |tx| increment(tx, &env.table, "a").await.map(|_| ()))
        .await
        .unwrap();
    assert_eq!(v(&env, "a").await, n(2), "only the waiter's increment");
    assert_eq!(owner(&env, "b").await, None, "the rollback completed");
    assert_clean(&env).await;
}

/// A wounder rolled back after it judged a younger holder without record decides nothing: the
/// holder's tombstone lands only while the wounder's own record is pending, as the wound of a
/// holder with a record does (found by the contention model, `TombstoneIgnoresWounder`: a wounder
/// rolled back since could roll back the oldest pending transaction).
#[tokio::test]
async fn a_wounder_rolled_back_after_judging_a_holder_without_record_tombstones_nothing() {
    let env = env("unrec-wounder", Duration::from_secs(10)).await;
    // Just before the older transaction's tombstone of the holder goes out, another coordinator
    // rolls the older transaction back.
    let wounder: std::sync::Arc<std::sync::Mutex<Option<TxId>>> = Default::default();
    let (txt, imgt) = (
        env.manager.transactions_table().to_string(),
        env.manager.images_table().to_string(),
    );
    let to_roll_back = wounder.clone();
    let hook = RunBefore::new("*", "_TxX", move || {
        let id = to_roll_back
            .lock()
            .unwrap()
            .clone()
            .expect("the wounder began");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let m = dynamodb_transactions::TransactionManager::builder(client())
            .transactions_table(&txt)
            .images_table(&imgt)
            .build();
        rt.block_on(m.rollback_transaction(&id)).unwrap();
    });
    let m_older = coordinator_on(&env, client_with(vec![shared(hook.clone())]), |s| {
        ticket_first(s, Duration::from_secs(10))
    });
    let older = m_older.begin();
    let older_id = older.id().clone();
    *wounder.lock().unwrap() = Some(older_id.clone());
    increment(&older, &env.table, "b").await.unwrap();
    let holder = env.manager.begin();
    let id = holder.id().clone();
    increment(&holder, &env.table, "a").await.unwrap();

    // The older transaction's second read meets the younger holder: a grace, then its tombstone,
    // by then that of a transaction rolled back.
    let read = increment(&older, &env.table, "a").await;
    assert!(hook.ran(), "the tombstone was tried");
    assert!(header_row(&env, &id).await.is_none(), "no tombstone");
    assert!(matches!(read, Err(Error::RolledBack { .. })), "{read:?}");
    assert_eq!(owner(&env, "a").await.as_deref(), Some(id.as_str()));
    holder.commit().await.unwrap();
    assert_eq!(
        env.tx_state(&older_id).await.map(|s| s.0),
        Some(TxState::RolledBack)
    );
    assert_eq!((v(&env, "a").await, v(&env, "b").await), (n(2), n(1)));
    assert_clean(&env).await;
}

/// Loses the answer to the first request of `operation` whose body contains `needle`, after
/// DynamoDB applied it (the caller gets an error it cannot tell from a request that never landed).
#[derive(Debug, Clone)]
struct LoseAnswer {
    operation: &'static str,
    needle: &'static str,
    lost: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

#[derive(Debug)]
struct Losing;

impl aws_sdk_dynamodb::config::Intercept for LoseAnswer {
    fn name(&self) -> &'static str {
        "LoseAnswer"
    }

    fn read_before_transmit(
        &self,
        ctx: &aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
        _rc: &aws_sdk_dynamodb::config::RuntimeComponents,
        cfg: &mut aws_sdk_dynamodb::config::ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        let req = ctx.request();
        let target = req.headers().get("x-amz-target").unwrap_or_default();
        let body = req.body().bytes().unwrap_or_default();
        if target.ends_with(&format!(".{}", self.operation))
            && String::from_utf8_lossy(body).contains(self.needle)
            && !self.lost.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            cfg.interceptor_state().store_put(Losing);
        }
        Ok(())
    }

    fn read_before_deserialization(
        &self,
        _ctx: &aws_sdk_dynamodb::config::interceptors::BeforeDeserializationInterceptorContextRef<
            '_,
        >,
        _rc: &aws_sdk_dynamodb::config::RuntimeComponents,
        cfg: &mut aws_sdk_dynamodb::config::ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        match cfg.load::<Losing>() {
            Some(_) => Err("the answer was lost".into()),
            None => Ok(()),
        }
    }
}

impl aws_smithy_types::config_bag::Storable for Losing {
    type Storer = aws_smithy_types::config_bag::StoreReplace<Self>;
}

/// The tombstone a contender with a record puts (with the check on its own record) lands, and its
/// answer is lost: putting it again finds it, and the holder is released as if the answer had come.
#[tokio::test]
async fn a_lost_answer_to_a_checked_tombstone_is_resolved_by_putting_it_again() {
    let env = env("unrec-lost-stone", Duration::from_secs(10)).await;
    let lose = LoseAnswer {
        operation: "TransactWriteItems",
        needle: "_TxX",
        lost: Default::default(),
    };
    let m_older = coordinator_on(&env, client_with(vec![shared(lose.clone())]), |s| {
        ticket_first(s, Duration::from_secs(10))
    });
    let older = m_older.begin();
    increment(&older, &env.table, "b").await.unwrap();
    let holder = env.manager.begin();
    increment(&holder, &env.table, "a").await.unwrap();

    increment(&older, &env.table, "a").await.unwrap();
    assert!(
        lose.lost.load(std::sync::atomic::Ordering::SeqCst),
        "an answer was lost"
    );
    older.commit().await.unwrap();
    holder_was_tombstoned(&env, holder).await;
}

/// A contender with a record rolls back a holder without record (no ticket, no grace) under a
/// checked tombstone: a crash before or after each of the contender's requests (its lock of `b`,
/// its record, the look at `a`, the tombstone, the release, its lock of `a`, the commit). Whatever
/// the contender's record then says is finished; the holder commits if its lock is still there; a
/// third transaction increments both items; each holds exactly the increments that committed.
#[tokio::test]
async fn a_crash_at_every_request_of_a_contender_tombstoning_a_holder_is_recovered() {
    let no_grace = |s: &mut Settings| {
        on_demand(s);
        s.wound_grace = Duration::ZERO;
    };
    let env = TestEnv::with_settings("unrec-crash", no_grace).await;
    seed(&env, &["a", "b"]).await;
    warm(&env).await;
    super::record_on_demand::list_table(&env.manager, &env.table).await;
    let m2 = coordinator_with(&env, no_grace);
    let (mut a, mut b) = (1, 1);
    let mut last_reached = 0;
    'sweep: for k in 1..=16u64 {
        for mode in [FaultMode::BeforeSend, FaultMode::AfterSend] {
            let holder = m2.begin();
            increment(&holder, &env.table, "a").await.unwrap();
            env.faults.crash_at(k, mode);
            env.counter.reset();
            let contender = env.manager.begin();
            let id = contender.id().clone();
            let steps = async {
                increment(&contender, &env.table, "b").await?;
                increment(&contender, &env.table, "a").await
            };
            let outcome = match steps.await {
                Ok(_) => contender.commit().await,
                Err(e) => {
                    contender.abandon();
                    Err(e)
                }
            };
            let struck = env.faults.struck();
            env.faults.disarm();
            let label = format!("crash {mode:?} at request {k}: {outcome:?}");
            if !struck {
                outcome.unwrap_or_else(|e| panic!("{label}: {e}"));
                let c = env.counter.snapshot();
                println!("the contender's requests: {c:?}");
                assert!(
                    c.get("TransactWriteItems").is_some_and(|&t| t >= 2),
                    "the checked tombstone and the commit: {c:?}"
                );
            } else {
                last_reached = k;
            }
            if finish_crashed(&env, &m2, &id).await == TxState::Committed {
                (a, b) = (a + 1, b + 1);
            }
            match holder.commit().await {
                Ok(()) => a += 1,
                Err(Error::RolledBack { .. }) => {}
                Err(e) => panic!("{label}: holder: {e}"),
            }
            let third = m2.begin();
            increment(&third, &env.table, "a")
                .await
                .unwrap_or_else(|e| panic!("{label}: third: {e}"));
            increment(&third, &env.table, "b").await.unwrap();
            third.commit().await.unwrap();
            (a, b) = (a + 1, b + 1);
            assert_eq!(v(&env, "a").await, n(a), "{label}: a");
            assert_eq!(v(&env, "b").await, n(b), "{label}: b");
            assert_clean(&env).await;
            if !struck {
                break 'sweep;
            }
        }
    }
    println!("the contender's path: {last_reached} requests");
    assert!(last_reached >= 6, "the sweep reached the tombstone");
}
