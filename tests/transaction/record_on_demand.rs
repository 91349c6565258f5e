//! `Settings::record_on_demand`: the first locked read takes its lock alone; a transaction that
//! writes only the item it read commits with one conditional write and never has a record; one
//! that needs more creates its record then. What each outcome leaves on the item and the record.
use super::*;
use dynamodb_transactions::fault::{FaultMode, LateDelivery, ServiceAnswer, ServiceFaults};
use dynamodb_transactions::{Error, Transaction, TransactionManager, TxState};

pub(super) fn on_demand(s: &mut dynamodb_transactions::Settings) {
    s.record_on_demand = true;
}

async fn env(prefix: &str) -> TestEnv {
    let env = TestEnv::with_settings(prefix, on_demand).await;
    seed(&env, &["a", "b"]).await;
    warm(&env).await;
    list_table(&env.manager, &env.table).await;
    env.counter.reset();
    env
}

/// A read of `b` alone in a transaction of `m`: `m` lists `table` as holding locks without record
/// (once per manager and table, before its first such lock), so that the requests a test counts
/// or arms a fault at are the transaction's own.
pub(super) async fn list_table(m: &TransactionManager, table: &str) {
    let tx = m.begin();
    read(&tx, table, "b").await.unwrap();
    tx.commit().await.unwrap();
}

#[tokio::test]
async fn the_first_lock_without_record_on_a_table_lists_the_table_first() {
    let env = TestEnv::with_settings("rod-list", on_demand).await;
    seed(&env, &["a"]).await;
    warm(&env).await;
    env.counter.reset();
    let list_key = item(&[("_TxId", s("~unrecorded-tables")), ("_TxN", n(0))]);
    let row = || env.raw_get(env.manager.transactions_table(), &list_key);
    assert!(row().await.is_none());
    for _ in 0..2 {
        let tx = env.manager.begin();
        increment(&tx, &env.table, "a").await.unwrap();
        tx.commit().await.unwrap();
    }
    // The list once, then the lock and the commit of each transaction.
    assert_eq!(env.counter.snapshot().get("UpdateItem"), Some(&5));
    let listed = row().await.expect("the list")["_TxB"].clone();
    assert_eq!(listed, AttributeValue::Ss(vec![env.table.clone()]));
    assert_eq!(v(&env, "a").await, n(3));
    assert_clean(&env).await;
}

/// With the default settings a transfer's first read takes its lock alone, its second read's
/// lock goes out with the record's creation, which names both reads, and the commit is one
/// `TransactWriteItems`: 4 requests on 3 round trips (with a record from the first read, 5 on
/// 3), and the record names both locks before the commit.
#[tokio::test]
async fn by_default_a_transfer_is_four_requests_on_three_round_trips() {
    let default = dynamodb_transactions::Settings::default();
    assert!(default.record_on_demand, "on by default");
    let env = TestEnv::with_settings("rod-default", |s| {
        s.record_on_demand = default.record_on_demand
    })
    .await;
    seed(&env, &["a", "b"]).await;
    warm(&env).await;
    list_table(&env.manager, &env.table).await;
    env.counter.reset();
    // Each phase's requests and round trips, counted before the test looks at the tables.
    let (mut requests, mut round_trips) = (0, 0);
    let mut phase = |env: &TestEnv| {
        requests += env.counter.total();
        round_trips += env.counter.round_trips();
        let c = env.counter.snapshot();
        env.counter.reset();
        c
    };
    let tx = env.manager.begin();
    let a = read(&tx, &env.table, "a").await.unwrap().unwrap();
    let c = phase(&env);
    assert_eq!(c.get("UpdateItem"), Some(&1), "the lock alone: {c:?}");
    assert_eq!(env.tx_state(tx.id()).await, None, "no record yet");
    env.counter.reset();
    let b = read(&tx, &env.table, "b").await.unwrap().unwrap();
    phase(&env);
    let rows = env.record_rows(tx.id()).await;
    let named = rows
        .iter()
        .filter_map(|r| r.get("_TxR").and_then(|v| v.as_l().ok()))
        .flatten()
        .count();
    assert_eq!(named, 2, "the creation names both reads: {rows:?}");
    env.counter.reset();
    set(&tx, &env.table, "a", a - 1).await.unwrap();
    set(&tx, &env.table, "b", b + 1).await.unwrap();
    tx.commit().await.unwrap();
    let c = phase(&env);
    assert_eq!(c.get("TransactWriteItems"), Some(&1), "the commit: {c:?}");
    assert_eq!((requests, round_trips), (4, 3));
    assert_eq!(v(&env, "a").await, n(0));
    assert_eq!(v(&env, "b").await, n(2));
    assert_clean(&env).await;
}

/// Reads `id` under lock and buffers `SET v = <read> + 1`.
pub(super) async fn increment(
    tx: &Transaction,
    table: &str,
    id: &str,
) -> dynamodb_transactions::Result<i64> {
    let v = read(tx, table, id).await?.unwrap_or(0) + 1;
    set(tx, table, id, v).await?;
    Ok(v)
}

/// Finishes a crashed transaction wherever its record says it is, through `m`: rolls a pending
/// one back, completes a decided one. Its outcome (rolled back when it has no record).
pub(super) async fn finish_crashed(env: &TestEnv, m: &TransactionManager, id: &TxId) -> TxState {
    match env.tx_state(id).await {
        Some((TxState::Pending, _)) => {
            m.rollback_transaction(id).await.unwrap();
            TxState::RolledBack
        }
        Some((state, _)) => {
            m.complete_transaction(id).await.unwrap();
            state
        }
        None => TxState::RolledBack,
    }
}

pub(super) async fn v(env: &TestEnv, id: &str) -> AttributeValue {
    env.raw_get(&env.table, &key(id)).await.unwrap()["v"].clone()
}

pub(super) async fn owner(env: &TestEnv, id: &str) -> Option<String> {
    env.raw_get(&env.table, &key(id))
        .await
        .unwrap()
        .get("_TxId")
        .map(|v| v.as_s().unwrap().clone())
}

/// A crash before or after the list's write (the first lock without record of a manager on a
/// table): the read fails and no lock goes out; the next transaction lists the table and goes on.
#[tokio::test]
async fn a_failed_listing_sends_no_lock() {
    let env = TestEnv::with_settings("rod-list-crash", on_demand).await;
    seed(&env, &["a"]).await;
    warm(&env).await;
    for mode in [FaultMode::BeforeSend, FaultMode::AfterSend] {
        env.faults.crash_at(1, mode);
        let tx = env.manager.begin();
        let err = read(&tx, &env.table, "a").await.unwrap_err();
        assert!(env.faults.struck(), "{mode:?}");
        env.faults.disarm();
        assert!(
            !matches!(err, Error::RolledBack { .. }),
            "{mode:?}: {err:?}"
        );
        tx.abandon();
        assert_eq!(owner(&env, "a").await, None, "{mode:?}: no lock sent");
    }
    let tx = env.manager.begin();
    increment(&tx, &env.table, "a").await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(v(&env, "a").await, n(2));
    assert_clean(&env).await;
}

#[tokio::test]
async fn a_read_modify_write_of_one_item_is_two_requests_and_no_record() {
    let env = env("rod-one").await;
    let tx = env.manager.begin();
    let id = tx.id().clone();
    increment(&tx, &env.table, "a").await.unwrap();
    // Locked by the read, with no record.
    assert_eq!(owner(&env, "a").await.as_deref(), Some(id.as_str()));
    assert!(header_row(&env, &id).await.is_none());
    tx.commit().await.unwrap();
    // The lock and the commit (the test's own reads are `GetItem`s).
    let c = env.counter.snapshot();
    assert_eq!(c.get("UpdateItem"), Some(&2), "{c:?}");
    assert_eq!(env.counter.total(), 2 + 2, "{c:?}");
    assert_eq!(v(&env, "a").await, n(2));
    assert!(header_row(&env, &id).await.is_none(), "no record written");
    assert_clean(&env).await;
}

#[tokio::test]
async fn a_second_read_of_the_item_writes_nothing() {
    let env = env("rod-again").await;
    let tx = env.manager.begin();
    let id = tx.id().clone();
    for _ in 0..2 {
        assert_eq!(read(&tx, &env.table, "a").await.unwrap(), Some(1));
    }
    increment(&tx, &env.table, "a").await.unwrap();
    tx.commit().await.unwrap();
    let c = env.counter.snapshot();
    assert_eq!(c.get("UpdateItem"), Some(&2), "{c:?}");
    assert_eq!(c.get("PutItem"), None, "no record created: {c:?}");
    assert!(header_row(&env, &id).await.is_none());
    assert_eq!(v(&env, "a").await, n(2));
    assert_clean(&env).await;
}

#[tokio::test]
async fn a_read_alone_commits_by_releasing_its_lock() {
    let env = env("rod-read").await;
    let tx = env.manager.begin();
    let id = tx.id().clone();
    read(&tx, &env.table, "a").await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(env.counter.total(), 2);
    assert!(header_row(&env, &id).await.is_none());
    assert_eq!(v(&env, "a").await, n(1));
    assert_clean(&env).await;
}

#[tokio::test]
async fn a_second_item_creates_the_record_naming_both_reads() {
    let env = env("rod-two").await;
    let tx = env.manager.begin();
    let id = tx.id().clone();
    increment(&tx, &env.table, "a").await.unwrap();
    assert!(header_row(&env, &id).await.is_none());
    increment(&tx, &env.table, "b").await.unwrap();
    let header = header_row(&env, &id)
        .await
        .expect("created by the second read");
    let named: Vec<String> = header["_TxR"]
        .as_l()
        .unwrap()
        .iter()
        .map(|r| r.as_m().unwrap()["o"].as_s().unwrap().clone())
        .collect();
    assert_eq!(
        named,
        ["G", "U", "G"],
        "the record names the first read and its write"
    );
    tx.commit().await.unwrap();
    assert_eq!(
        env.tx_state(&id).await.map(|s| s.0),
        Some(TxState::Committed)
    );
    assert_eq!((v(&env, "a").await, v(&env, "b").await), (n(2), n(2)));
    assert_clean(&env).await;
}

/// Readers outside the transaction, at either isolation level, see through a lock taken without
/// a record (it carries no change) and leave it to its holder, which then commits.
#[tokio::test]
async fn readers_see_through_a_lock_without_record_and_leave_it() {
    let env = env("rod-readers").await;
    let tx = env.manager.begin();
    increment(&tx, &env.table, "a").await.unwrap();
    for level in [
        dynamodb_transactions::IsolationLevel::Uncommitted,
        dynamodb_transactions::IsolationLevel::Committed,
    ] {
        let got = env
            .manager
            .get_item()
            .table_name(&env.table)
            .key("Id", s("a"))
            .isolation(level)
            .send()
            .await
            .unwrap();
        assert_eq!(got.item().unwrap()["v"], n(1), "{level:?}");
        let raw = env.raw_get(&env.table, &key("a")).await.unwrap();
        assert_eq!(raw["_TxId"], s(tx.id().as_str()), "{level:?}: still locked");
    }
    tx.commit().await.unwrap();
    assert_eq!(v(&env, "a").await, n(2));
    assert_clean(&env).await;
}

/// A transaction that read one item without a record (and buffered its write) is handed off:
/// `hand_off` creates the record, naming the read and the write, so that another coordinator
/// can resume it and commit it, or roll it back; a read alone handed off the same.
#[tokio::test]
async fn a_hand_off_creates_the_record_another_coordinator_resumes() {
    let env = env("rod-hand").await;
    let (m2, _) = env.second_coordinator();
    let tx = env.manager.begin();
    increment(&tx, &env.table, "a").await.unwrap();
    let id = tx.hand_off().await.unwrap();
    assert_eq!(
        env.tx_state(&id).await.map(|s| s.0),
        Some(TxState::Pending),
        "the hand-off created the record"
    );
    m2.resume(&id).await.unwrap().commit().await.unwrap();
    assert_eq!(v(&env, "a").await, n(2));
    let read_alone = env.manager.begin();
    read(&read_alone, &env.table, "b").await.unwrap();
    let id = read_alone.hand_off().await.unwrap();
    m2.rollback_transaction(&id).await.unwrap();
    assert_eq!(
        env.tx_state(&id).await.map(|s| s.0),
        Some(TxState::RolledBack)
    );
    assert_clean(&env).await;
}

#[tokio::test]
async fn a_buffered_write_on_another_item_creates_the_record_at_the_commit() {
    let env = env("rod-buf").await;
    let tx = env.manager.begin();
    let id = tx.id().clone();
    increment(&tx, &env.table, "a").await.unwrap();
    set(&tx, &env.table, "b", 5).await.unwrap();
    assert!(
        header_row(&env, &id).await.is_none(),
        "buffered writes send nothing"
    );
    tx.commit().await.unwrap();
    assert_eq!(
        env.tx_state(&id).await.map(|s| s.0),
        Some(TxState::Committed)
    );
    assert_eq!((v(&env, "a").await, v(&env, "b").await), (n(2), n(5)));
    assert_clean(&env).await;
}

#[tokio::test]
async fn a_contender_releases_the_lock_under_a_tombstone_and_the_commit_reports_a_rollback() {
    let env = env("rod-tomb").await;
    let tx = env.manager.begin();
    let id = tx.id().clone();
    increment(&tx, &env.table, "a").await.unwrap();
    // A contender (defaults) writes `a`: it finds no record, gives the holder its grace, then
    // tombstones it, releases the lock and commits.
    let (m2, _) = env.second_coordinator();
    let w = m2.begin();
    set(&w, &env.table, "a", 7).await.unwrap();
    w.commit().await.unwrap();
    let stone = header_row(&env, &id).await.expect("a tombstone");
    assert!(stone.contains_key("_TxX"), "{stone:?}");
    let err = tx.commit().await.unwrap_err();
    assert!(matches!(err, Error::RolledBack { .. }), "{err:?}");
    assert_eq!(v(&env, "a").await, n(7), "the contender's write stands");
    assert_clean(&env).await;
}

#[tokio::test]
async fn a_false_condition_is_reported_and_releases_the_lock() {
    let env = env("rod-cond").await;
    let tx = env.manager.begin();
    read(&tx, &env.table, "a").await.unwrap();
    tx.update_item()
        .table_name(&env.table)
        .key("Id", s("a"))
        .update_expression("SET v = :v")
        .condition_expression("v = :old")
        .expression_attribute_values(":v", n(5))
        .expression_attribute_values(":old", n(9))
        .send()
        .await
        .unwrap();
    let err = tx.commit().await.unwrap_err();
    assert!(matches!(err, Error::ConditionFailed { .. }), "{err:?}");
    assert_eq!(v(&env, "a").await, n(1));
    assert_clean(&env).await;
}

#[tokio::test]
async fn a_rollback_and_a_dropped_handle_release_the_lock() {
    let env = env("rod-drop").await;
    let tx = env.manager.begin();
    let id = tx.id().clone();
    increment(&tx, &env.table, "a").await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(owner(&env, "a").await, None);
    assert!(header_row(&env, &id).await.is_none());

    let m = coordinator_on(&env, env.client.clone(), |s| {
        on_demand(s);
        s.rollback_on_drop = true;
    });
    let tx = m.begin();
    increment(&tx, &env.table, "b").await.unwrap();
    assert!(owner(&env, "b").await.is_some());
    drop(tx);
    let mut released = false;
    for _ in 0..100 {
        if owner(&env, "b").await.is_none() {
            released = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(released, "the dropped handle's lock is still on b");
    assert_eq!((v(&env, "a").await, v(&env, "b").await), (n(1), n(1)));
    assert_clean(&env).await;
}

/// The commit's answer is lost after it landed: sent again, it finds our lock gone and no
/// tombstone, which only our own commit can leave.
#[tokio::test]
async fn a_lost_commit_answer_is_learnt_as_committed() {
    let env = env("rod-lost").await;
    let tx = env.manager.begin();
    let id = tx.id().clone();
    increment(&tx, &env.table, "a").await.unwrap();
    env.faults.fail_once_at(1, FaultMode::AfterSend);
    tx.commit().await.unwrap();
    assert!(env.faults.struck());
    assert_eq!(v(&env, "a").await, n(2));
    assert!(header_row(&env, &id).await.is_none());
    assert_clean(&env).await;
}

/// The SDK resends the commit on its own after its first send landed (a 500 after the write),
/// while a contender that met our lock before the commit landed has tombstoned us and not yet
/// sent its release. The resend finds our lock gone beside a tombstone, as it would had the
/// contender's release landed first: the commit may have landed, so it is reported unknown, never
/// rolled back (which `run` would take as leave to apply it a second time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_the_sdk_resent_across_a_contenders_tombstone_is_not_reported_rolled_back() {
    let env = env("rod-resent").await;
    let answers = ServiceFaults::new();
    let m1 = coordinator_on(&env, client_with(vec![shared(answers.clone())]), on_demand);
    list_table(&m1, &env.table).await;
    let tx = m1.begin();
    let id = tx.id().clone();
    increment(&tx, &env.table, "a").await.unwrap();

    // The contender's release of our lock, sent once its tombstone is down, waits for our commit.
    let (reached, mut at_release) = tokio::sync::mpsc::unbounded_channel();
    let (go_on, wait) = std::sync::mpsc::channel::<()>();
    let hook = RunBefore::unarmed("UpdateItem", move || {
        reached.send(()).unwrap();
        wait.recv().unwrap();
    });
    let m2 = coordinator_on(&env, client_with(vec![shared(hook.clone())]), |s| {
        s.wound_grace = std::time::Duration::from_millis(50);
    });
    hook.arm(&[id.as_str()]);
    let table = env.table.clone();
    let contender = tokio::spawn(async move {
        let c = m2.begin();
        increment(&c, &table, "a").await?;
        c.commit().await
    });
    at_release
        .recv()
        .await
        .expect("the contender reached its release");
    let stone = header_row(&env, &id)
        .await
        .expect("the contender's tombstone");
    assert!(stone.contains_key("_TxX"), "{stone:?}");
    assert_eq!(owner(&env, "a").await.as_deref(), Some(id.as_str()));

    // Our commit lands; its answer is a 500; the SDK's resend finds our lock gone.
    answers.answer_after_send("UpdateItem", 1, 1, ServiceAnswer::InternalServerError);
    let outcome = tx.commit().await;
    assert_eq!(answers.injected(), 1);
    assert!(answers.requests_seen() >= 2, "the SDK resent the commit");
    assert_eq!((v(&env, "a").await, owner(&env, "a").await), (n(2), None));
    go_on.send(()).unwrap();
    contender.await.unwrap().unwrap();
    assert_eq!(v(&env, "a").await, n(3), "both increments landed");
    let err = outcome.unwrap_err();
    assert!(
        matches!(err, Error::UnknownOutcome { .. }),
        "our commit landed: it must not be reported rolled back: {err:?}"
    );
    assert_clean(&env).await;
}

/// A crash before or after each request of the path (the lock, the commit): a contender that
/// increments `a` then finds it free or frees it, and `a` holds exactly the increments that
/// landed; no lock, image or pending record is left.
#[tokio::test]
async fn a_crash_at_every_request_is_recovered_by_a_contender() {
    let env = env("rod-crash").await;
    let (m2, _) = env.second_coordinator();
    let mut expected = 1;
    for k in 1..=2u64 {
        for mode in [FaultMode::BeforeSend, FaultMode::AfterSend] {
            env.faults.crash_at(k, mode);
            let tx = env.manager.begin();
            let id = tx.id().clone();
            let outcome = match increment(&tx, &env.table, "a").await {
                Ok(_) => tx.commit().await,
                Err(e) => {
                    tx.abandon();
                    Err(e)
                }
            };
            assert!(env.faults.struck(), "request {k} was not reached");
            env.faults.disarm();
            let label = format!("crash {mode:?} at request {k}: {outcome:?}");
            assert!(outcome.is_err(), "{label}");
            // The commit landed only when the crash came after it was sent.
            if (k, mode) == (2, FaultMode::AfterSend) {
                expected += 1;
            }
            let c = m2.begin();
            increment(&c, &env.table, "a")
                .await
                .unwrap_or_else(|e| panic!("{label}: contender: {e}"));
            c.commit().await.unwrap();
            expected += 1;
            assert_eq!(v(&env, "a").await, n(expected), "{label}");
            if let Some(row) = header_row(&env, &id).await {
                assert!(
                    row.contains_key("_TxX"),
                    "{label}: only a tombstone: {row:?}"
                );
            }
            assert_clean(&env).await;
        }
    }
}

/// Workers incrementing one item in `run`, every transaction without a record: no increment is
/// lost or doubled (through the DynamoDB profile too, when the suite runs under it).
#[tokio::test]
async fn concurrent_increments_of_one_item_are_all_counted() {
    let env = env("rod-hot").await;
    let workers = 8;
    let each = 5;
    let work = (0..workers).map(|_| async {
        for _ in 0..each {
            env.manager
                .run(async |tx| increment(tx, &env.table, "a").await.map(|_| ()))
                .await
                .unwrap();
        }
    });
    futures::future::join_all(work).await;
    assert_eq!(v(&env, "a").await, n(1 + workers * each));
    assert_clean(&env).await;
}

/// A transaction without record that must wound a holder to get its item (a younger one,
/// running past its grace) does so: it holds nothing, so no rollback of its own can be pending,
/// and the wound does not ask for its record.
#[tokio::test]
async fn a_waiter_without_record_wounds_a_holder_past_its_grace() {
    let env = env("rod-wound").await;
    let (m2, _) = env.second_coordinator();
    // The holder (with a record, no ticket: younger than any ticket) reads `a` and stalls.
    let holder = m2.begin();
    read(&holder, &env.table, "a").await.unwrap();
    let tx = env.manager.begin();
    let id = tx.id().clone();
    increment(&tx, &env.table, "a").await.unwrap();
    tx.commit().await.unwrap();
    assert!(header_row(&env, &id).await.is_none(), "still no record");
    assert_eq!(v(&env, "a").await, n(2));
    let err = holder.commit().await.unwrap_err();
    assert!(matches!(err, Error::RolledBack { .. }), "{err:?}");
    assert_clean(&env).await;
}

/// A transfer whose first read takes its lock without a record and whose second read creates the
/// record with its lock: a crash before or after each request (the first lock, the creation and
/// the second lock in either order, the commit). Whatever the record then says is finished, a
/// contender increments both items, and each holds exactly the increments that committed.
#[tokio::test]
async fn a_crash_at_every_request_of_a_transfer_is_recovered() {
    let env = env("rod-crash2").await;
    let (m2, _) = env.second_coordinator();
    let mut expected = 1;
    for k in 1..=4u64 {
        for mode in [FaultMode::BeforeSend, FaultMode::AfterSend] {
            env.faults.crash_at(k, mode);
            let tx = env.manager.begin();
            let id = tx.id().clone();
            let steps = async {
                increment(&tx, &env.table, "a").await?;
                increment(&tx, &env.table, "b").await
            };
            let outcome = match steps.await {
                Ok(_) => tx.commit().await,
                Err(e) => {
                    tx.abandon();
                    Err(e)
                }
            };
            assert!(env.faults.struck(), "request {k} was not reached");
            env.faults.disarm();
            let label = format!("crash {mode:?} at request {k}: {outcome:?}");
            if finish_crashed(&env, &m2, &id).await == TxState::Committed {
                expected += 1;
            }
            let c = m2.begin();
            increment(&c, &env.table, "a")
                .await
                .unwrap_or_else(|e| panic!("{label}: contender: {e}"));
            increment(&c, &env.table, "b").await.unwrap();
            c.commit().await.unwrap();
            expected += 1;
            assert_eq!(v(&env, "a").await, n(expected), "{label}: a");
            assert_eq!(v(&env, "b").await, n(expected), "{label}: b");
            assert_clean(&env).await;
        }
    }
}

/// A lock attempt of the transaction stuck in the network lands after a contender released the
/// lock the read took (under a tombstone) and wrote the item: the commit is conditional on the
/// read's lock itself (its stamp), not only on the transaction owning the item, so it fails, and
/// the late lock is released.
#[tokio::test]
async fn a_lock_attempt_landing_late_does_not_pass_for_the_reads_lock() {
    let env = env("rod-late").await;
    let late = LateDelivery::new();
    let conf = client()
        .config()
        .to_builder()
        .http_client(late.http_client())
        .build();
    let m = TransactionManager::builder(aws_sdk_dynamodb::Client::from_conf(conf))
        .transactions_table(env.manager.transactions_table())
        .images_table(env.manager.images_table())
        .configure(|s| {
            on_demand(s);
            s.rollback_on_drop = false;
        })
        .build();
    let read_b = || async {
        m.get_item()
            .table_name(&env.table)
            .key("Id", s("b"))
            .send()
            .await
            .unwrap()
    };
    read_b().await;
    list_table(&m, &env.table).await;
    // The first lock attempt fails for its sender but is kept; the second takes the lock.
    late.hold("UpdateItem", 1, 1, "GetItem");
    let tx = m.begin();
    increment(&tx, &env.table, "a").await.unwrap();
    assert_eq!(late.struck(), 1, "the first lock attempt is held");
    // A contender tombstones the transaction, releases its lock and writes `a`.
    let (m2, _) = env.second_coordinator();
    let w = m2.begin();
    set(&w, &env.table, "a", 7).await.unwrap();
    w.commit().await.unwrap();
    // The held attempt lands now, on the free item.
    read_b().await;
    assert_eq!(owner(&env, "a").await.as_deref(), Some(tx.id().as_str()));
    let err = tx.commit().await.unwrap_err();
    assert!(matches!(err, Error::RolledBack { .. }), "{err:?}");
    assert_eq!(v(&env, "a").await, n(7), "the contender's write stands");
    assert_clean(&env).await;
}
