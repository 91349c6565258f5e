//! `Settings::reorder_held_reads`: a lock meeting contention on an item below items the
//! transaction holds only for reading releases those reads, waits for the item, then takes them
//! back in key order, checking each against what it read.

use std::time::Duration;

use dynamodb_transactions::{Error, TicketSource, Transaction, TransactionManager, TxId, TxState};

use crate::common::*;
use crate::retries::{read_values, write_values};
use crate::{held_by, lock, ordered_with};

fn reordering(env: &TestEnv) -> TransactionManager {
    reordering_with(env, false)
}

/// With `Settings::reorder_keeps_turn`: a released read leaves the transaction's mark at its item.
fn keeping_turn(env: &TestEnv) -> TransactionManager {
    reordering_with(env, true)
}

fn reordering_with(env: &TestEnv, keeps_turn: bool) -> TransactionManager {
    ordered_with(env, TicketSource::Counter, Duration::from_secs(30), |s| {
        s.reorder_held_reads = true;
        s.reorder_keeps_turn = keeps_turn;
        s.backoff_base = Duration::from_millis(1);
        s.wound_grace = Duration::from_secs(60);
        s.lock_wait = Duration::from_secs(60);
    })
}

/// `b` at 10; a holder of `a` (at 1) that sets it to 2 (buffered); a transaction that reads
/// `b`, then `a`, started while the holder holds `a`.
async fn staged(
    env: &TestEnv,
    m: &TransactionManager,
) -> (
    Transaction,
    tokio::task::JoinHandle<(Transaction, Result<Vec<i64>, Error>)>,
) {
    env.raw_put(&env.table, item(&[("Id", s("b")), ("v", n(10))]))
        .await;
    let holder = held_by(env, m, "a").await;
    let (m, table) = (m.clone(), env.table.clone());
    let reader = tokio::spawn(async move {
        let tx = m.begin();
        let read = read_values(&tx, &table, ["b", "a"]).await;
        (tx, read)
    });
    (holder, reader)
}

/// `a` and `b` hold `v` = `a` and `b`, unlocked, with nothing else.
async fn assert_values(env: &TestEnv, a: i64, b: i64) {
    for (k, v) in [("a", a), ("b", b)] {
        assert_eq!(
            env.raw_get(&env.table, &key(k)).await.unwrap(),
            item(&[("Id", s(k)), ("v", n(v))]),
            "{k}"
        );
    }
}

/// Waits until the reader waits at `a` (its mark there: the oldest waiter's) while the holder
/// still holds `a`, which it does only once it released `b`; then `b` is unlocked, and carries
/// the reader's turn only with `Settings::reorder_keeps_turn` (`keeps_turn`).
async fn b_released_while_a_held(env: &TestEnv, holder: &str, keeps_turn: bool) {
    tokio::time::timeout(Duration::from_secs(20), async {
        while !env
            .raw_get(&env.table, &key("a"))
            .await
            .unwrap()
            .contains_key("_TxH")
        {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("the reader waits at `a`");
    let a = env.raw_get(&env.table, &key("a")).await.unwrap();
    assert_eq!(a["_TxId"], s(holder), "{a:?}");
    let b = env.raw_get(&env.table, &key("b")).await.unwrap();
    assert!(!b.contains_key("_TxId"), "the reader released b: {b:?}");
    assert_eq!(
        b.contains_key("_TxH"),
        keeps_turn,
        "the reader keeps its turn at b only with the setting: {b:?}"
    );
}

/// The reader releases `b` while it waits at `a` (with the setting off, it waited holding `b`),
/// takes `a` once the holder commits, takes `b` back unchanged, and commits its transfer in one
/// attempt: its reads are `b` as it first read it and `a` as the holder left it.
#[tokio::test]
async fn a_read_below_held_reads_releases_them_and_takes_them_back_in_key_order() {
    let env = TestEnv::new("ct-reorder").await;
    let m = reordering(&env);
    let (holder, reader) = staged(&env, &m).await;
    b_released_while_a_held(&env, holder.id().as_str(), false).await;
    holder.commit().await.unwrap();
    let (tx, read) = reader.await.unwrap();
    assert_eq!(read.unwrap(), vec![10, 2]);
    for k in ["a", "b"] {
        let raw = env.raw_get(&env.table, &key(k)).await.unwrap();
        assert_eq!(raw["_TxId"], s(tx.id().as_str()), "{k} held again: {raw:?}");
    }
    write_values(&tx, &env.table, [("b", 9), ("a", 3)])
        .await
        .unwrap();
    let id = tx.id().clone();
    tx.commit().await.unwrap();
    assert_eq!(
        env.tx_state(&id).await.map(|s| s.0),
        Some(TxState::Committed)
    );
    assert_values(&env, 3, 9).await;
}

/// With `Settings::reorder_keeps_turn`, a transaction younger than the reader that wants `b`
/// while the reader waits at `a` with `b` released is held off by the turn the reader keeps
/// there (its mark), so the reader takes `b` back unchanged and commits; the younger one takes
/// `b` after it.
#[tokio::test]
async fn a_younger_transaction_waits_behind_the_turn_a_released_read_keeps() {
    let env = TestEnv::new("ct-reorder-turn").await;
    let m = keeping_turn(&env);
    let (holder, reader) = staged(&env, &m).await;
    b_released_while_a_held(&env, holder.id().as_str(), true).await;
    let (m2, table) = (m.clone(), env.table.clone());
    let younger = tokio::spawn(async move {
        let tx = m2.begin();
        let v = read_values(&tx, &table, ["b", "b"]).await?;
        tx.update_item()
            .table_name(&table)
            .key("Id", s("b"))
            .update_expression("SET v = :v")
            .expression_attribute_values(":v", n(v[0] * 100))
            .send()
            .await?;
        tx.commit().await
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let b = env.raw_get(&env.table, &key("b")).await.unwrap();
    assert!(!b.contains_key("_TxId"), "the younger one took b: {b:?}");
    holder.commit().await.unwrap();
    let (tx, read) = reader.await.unwrap();
    assert_eq!(read.unwrap(), vec![10, 2]);
    write_values(&tx, &env.table, [("b", 9), ("a", 3)])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    younger.await.unwrap().unwrap();
    assert_eq!(
        env.raw_get(&env.table, &key("b")).await.unwrap(),
        item(&[("Id", s("b")), ("v", n(900))])
    );
}

/// By default (`Settings::reorder_keeps_turn` off), a transaction younger than the reader takes
/// `b` while the reader waits at `a` with `b` released, and commits a change to it; the reader,
/// `run`'s work, takes `a` once the holder commits and `b` back after the younger one, finds `b`
/// changed, and runs its work again in the same transaction: it moves 1 from `b` as the younger
/// one left it, once.
#[tokio::test]
async fn by_default_a_younger_transaction_takes_a_released_read_meanwhile() {
    let env = TestEnv::new("ct-reorder-pass").await;
    let m = reordering(&env);
    env.raw_put(&env.table, item(&[("Id", s("b")), ("v", n(10))]))
        .await;
    let holder = held_by(&env, &m, "a").await;
    let runs = std::sync::Mutex::new(Vec::new());
    let table = env.table.clone();
    let reader = m.run(async |tx| {
        let read = read_noting(tx, &table, &runs).await;
        let v = read?;
        write_values(tx, &table, [("b", v[0] - 1), ("a", v[1] + 1)]).await
    });
    let driver = async {
        b_released_while_a_held(&env, holder.id().as_str(), false).await;
        // Younger than the reader (tickets at begin): the turn it would keep would hold it off.
        let younger = m.begin();
        let v = read_values(&younger, &env.table, ["b", "b"]).await.unwrap();
        younger
            .update_item()
            .table_name(&env.table)
            .key("Id", s("b"))
            .update_expression("SET v = :v")
            .expression_attribute_values(":v", n(v[0] * 10))
            .send()
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(10), younger.commit())
            .await
            .expect("the younger transaction is not held off at b")
            .unwrap();
        holder.commit().await.unwrap();
    };
    let (out, ()) = tokio::join!(reader, driver);
    out.unwrap();
    let runs = runs.into_inner().unwrap();
    ran_again_in_its_transaction(&env, &runs, [100, 2]).await;
    assert_values(&env, 3, 99).await;
}

/// While the reader waits at `a` with `b` released, an older transaction changes `b` and commits.
/// Taking `b` back, the reader finds it changed: its transaction is rolled back (`RolledBack`),
/// it holds nothing, and `b` keeps the other transaction's value.
#[tokio::test]
async fn a_released_read_found_changed_rolls_the_transaction_back() {
    let env = TestEnv::new("ct-reorder-changed").await;
    let m = reordering(&env);
    // Older than the reader (tickets at begin): it passes the turn the reader keeps at `b`.
    let other = m.begin();
    let (holder, reader) = staged(&env, &m).await;
    b_released_while_a_held(&env, holder.id().as_str(), false).await;
    other
        .update_item()
        .table_name(&env.table)
        .key("Id", s("b"))
        .update_expression("SET v = :v")
        .expression_attribute_values(":v", n(5))
        .send()
        .await
        .unwrap();
    other.commit().await.unwrap();
    holder.commit().await.unwrap();
    let (tx, read) = reader.await.unwrap();
    assert!(matches!(read, Err(Error::RolledBack { .. })), "{read:?}");
    assert_eq!(
        env.tx_state(tx.id()).await,
        Some((TxState::RolledBack, true))
    );
    assert!(
        matches!(tx.commit().await, Err(Error::RolledBack { .. })),
        "a commit after it stays refused"
    );
    assert_values(&env, 2, 5).await;
}

/// The reader of [`a_released_read_found_changed_rolls_the_transaction_back`] as `run`'s work:
/// it reads `b`, then `a`, and moves 1 from `b` to `a`, while an older transaction sets `b` to 5
/// during its wait at `a`. With `swallow` the work ignores a failed read (it moves 1 from what it
/// read of `b` before). With `rolled_back`, an operator rolls the reader back while it waits at
/// `a`, just before the holder commits. Returns each run's transaction and its reads
/// (`Err(true)`: failed `RolledBack`).
async fn changed_in_run(env: &TestEnv, swallow: bool, rolled_back: bool) -> Vec<Run> {
    let m = reordering(env);
    let other = m.begin();
    env.raw_put(&env.table, item(&[("Id", s("b")), ("v", n(10))]))
        .await;
    let holder = held_by(env, &m, "a").await;
    let runs = std::sync::Mutex::new(Vec::new());
    let first: std::sync::Mutex<Option<TxId>> = Default::default();
    let table = env.table.clone();
    let reader = m.run(async |tx| {
        first.lock().unwrap().get_or_insert_with(|| tx.id().clone());
        let read = read_noting(tx, &table, &runs).await;
        let v = match read {
            Err(_) if swallow => vec![10, 2],
            read => read?,
        };
        write_values(tx, &table, [("b", v[0] - 1), ("a", v[1] + 1)]).await
    });
    let driver = async {
        b_released_while_a_held(env, holder.id().as_str(), false).await;
        other
            .update_item()
            .table_name(&env.table)
            .key("Id", s("b"))
            .update_expression("SET v = :v")
            .expression_attribute_values(":v", n(5))
            .send()
            .await
            .unwrap();
        other.commit().await.unwrap();
        if rolled_back {
            let reader = first.lock().unwrap().clone().unwrap();
            env.manager.rollback_transaction(&reader).await.unwrap();
        }
        holder.commit().await.unwrap();
    };
    let (out, ()) = tokio::join!(reader, driver);
    out.unwrap();
    // Whichever way, the transfer took effect once, from `b` as the older transaction left it.
    assert_values(env, 3, 4).await;
    runs.into_inner().unwrap()
}

/// A run of the reader's work: its transaction and what it read of `b`, then `a` (`Err(true)`:
/// failed `RolledBack`).
type Run = (TxId, Result<Vec<i64>, bool>);

/// What a run of the reader's work reads of `b`, then `a`, noted in `runs` with its transaction
/// (`Err(true)`: failed `RolledBack`).
async fn read_noting(
    tx: &Transaction,
    table: &str,
    runs: &std::sync::Mutex<Vec<Run>>,
) -> Result<Vec<i64>, Error> {
    let read = read_values(tx, table, ["b", "a"]).await;
    let seen = read
        .as_ref()
        .map(Clone::clone)
        .map_err(|e| matches!(e, Error::RolledBack { .. }));
    runs.lock().unwrap().push((tx.id().clone(), seen));
    read
}

/// The runs of a reader's work in `run` whose read taken back changed: the work ran twice in the
/// same transaction, the second time reading `read` (`b`, `a`), and that transaction committed.
async fn ran_again_in_its_transaction(env: &TestEnv, runs: &[Run], read: [i64; 2]) {
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(runs[0].1, Err(true), "{runs:?}");
    assert_eq!(runs[1].0, runs[0].0, "the same transaction: {runs:?}");
    assert_eq!(runs[1].1, Ok(read.to_vec()));
    assert_eq!(
        env.tx_state(&runs[0].0).await.map(|s| s.0),
        Some(TxState::Committed)
    );
}

/// The runs of [`changed_in_run`] when its first attempt is rolled back: the work ran twice, the
/// second time in a new transaction that read `b` as the older transaction left it.
async fn a_new_attempt_reads_b_as_changed(env: &TestEnv, runs: &[Run]) {
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(runs[0].1, Err(true), "{runs:?}");
    assert_ne!(runs[1].0, runs[0].0, "a new attempt: {runs:?}");
    assert_eq!(runs[1].1, Ok(vec![5, 2]));
    assert_eq!(
        env.tx_state(&runs[0].0).await,
        Some((TxState::RolledBack, true))
    );
}

/// In `run`, the reader finds `b` changed once it holds both items again, in key order, with
/// nothing written. Its work runs again in the same transaction, which keeps both locks (no new
/// attempt relocks them): the second run reads `b` as the older transaction left it and `a` as
/// the holder did, and commits.
#[tokio::test]
async fn in_run_a_changed_read_runs_the_work_again_holding_every_lock() {
    let env = TestEnv::new("ct-reorder-rerun").await;
    let runs = changed_in_run(&env, false, false).await;
    ran_again_in_its_transaction(&env, &runs, [5, 2]).await;
}

/// A work that ignores the failed read and writes from the stale value cannot commit it: the
/// commit of the transaction waiting to run the work again is refused (rolled back), and `run`'s
/// next attempt, a new transaction, reads `b` as it is.
#[tokio::test]
async fn in_run_a_work_ignoring_the_changed_read_does_not_commit_it() {
    let env = TestEnv::new("ct-reorder-swallow").await;
    let runs = changed_in_run(&env, true, false).await;
    a_new_attempt_reads_b_as_changed(&env, &runs).await;
}

/// A reader rolled back while it waits at `a` (by an operator, just before the holder commits),
/// whose next look takes `a` before it reads its own record, learns it once it holds both items
/// again, before its work would run again: that attempt ends there and `run`'s next attempt, a
/// new transaction, runs the work a second time, not a third.
#[tokio::test]
async fn in_run_a_transaction_rolled_back_meanwhile_does_not_run_the_work_again() {
    let env = TestEnv::new("ct-reorder-rerun-late").await;
    let runs = changed_in_run(&env, false, true).await;
    a_new_attempt_reads_b_as_changed(&env, &runs).await;
}

/// Regression: a first attempt that released its reads holds no lock while it waits for the item
/// below them, so it waits for a retry holding that item, as a first attempt holding nothing does.
/// It used to count the released reads as held and give its attempt up at once (a first attempt
/// holding other locks yields to a retry), which rolled back most reorders of the from-then-to
/// transfers through the DynamoDB profile. Here the holder of `a` is `run`'s retry; the reader,
/// a first attempt, reads `b`, then `a`: it releases `b` keeping its turn, waits, takes `a` once
/// the retry commits and `b` back unchanged.
#[tokio::test]
async fn a_first_attempt_that_released_its_reads_waits_for_a_retry() {
    let env = TestEnv::new("ct-reorder-retry").await;
    let m = reordering(&env);
    for (k, v) in [("a", 1), ("b", 10)] {
        env.raw_put(&env.table, item(&[("Id", s(k)), ("v", n(v))]))
            .await;
    }
    let (holding, go) = (tokio::sync::Notify::new(), tokio::sync::Notify::new());
    let attempts = std::sync::atomic::AtomicU32::new(0);
    let (table, other) = (env.table.clone(), env.manager.clone());
    let retry = m.run(async |tx| {
        let attempt = attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        let v = read_values(tx, &table, ["a", "a"]).await?;
        if attempt == 1 {
            // Rolled back by a competitor: the next attempt is a retry.
            other.rollback_transaction(tx.id()).await.unwrap();
        } else {
            holding.notify_one();
            go.notified().await;
        }
        tx.update_item()
            .table_name(&table)
            .key("Id", s("a"))
            .update_expression("SET v = :v")
            .expression_attribute_values(":v", n(v[0] + 1))
            .send()
            .await?;
        Ok(tx.id().clone())
    });
    let driver = async {
        holding.notified().await;
        let holder = env.raw_get(&env.table, &key("a")).await.unwrap()["_TxId"]
            .as_s()
            .unwrap()
            .clone();
        let (m, table) = (m.clone(), env.table.clone());
        let reader = tokio::spawn(async move {
            let tx = m.begin();
            let read = read_values(&tx, &table, ["b", "a"]).await;
            (tx, read)
        });
        b_released_while_a_held(&env, &holder, false).await;
        // Waiting, not given up: still pending, holding nothing but its turn at `b`.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!reader.is_finished(), "the reader gave up at `a`");
        go.notify_one();
        (holder, reader.await.unwrap())
    };
    let (committed, (holder, (tx, read))) = tokio::join!(retry, driver);
    assert_eq!(committed.unwrap().as_str(), holder);
    assert_eq!(attempts.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(
        read.unwrap(),
        vec![10, 2],
        "b as first read, a as the retry left it"
    );
    for k in ["a", "b"] {
        let raw = env.raw_get(&env.table, &key(k)).await.unwrap();
        assert_eq!(raw["_TxId"], s(tx.id().as_str()), "{k} held: {raw:?}");
    }
    write_values(&tx, &env.table, [("b", 9), ("a", 3)])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_values(&env, 3, 9).await;
}

/// A transaction that wrote an item above the one it waits for keeps it: only reads are released.
#[tokio::test]
async fn a_written_item_above_is_not_released() {
    let env = TestEnv::new("ct-reorder-written").await;
    let m = reordering(&env);
    for k in ["a", "b"] {
        env.raw_put(&env.table, item(&[("Id", s(k)), ("v", n(10))]))
            .await;
    }
    let holder = m.begin();
    lock(&holder, &env.table, "a").await.unwrap();
    let (m2, table) = (m.clone(), env.table.clone());
    let writer = tokio::spawn(async move {
        let tx = m2.begin();
        // Applied at once (ALL_NEW): `b` carries this transaction's write.
        tx.update_item()
            .table_name(&table)
            .key("Id", s("b"))
            .update_expression("SET v = :v")
            .expression_attribute_values(":v", n(9))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllNew)
            .send()
            .await?;
        let a = read_values(&tx, &table, ["a", "a"]).await?;
        Ok::<_, Error>((tx, a))
    });
    // `b` stays locked by the writer while it waits at `a`.
    let b_owner = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let b = env.raw_get(&env.table, &key("b")).await.unwrap();
            if b.contains_key("_TxA") {
                break b["_TxId"].clone();
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the writer applied its write of b");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let b = env.raw_get(&env.table, &key("b")).await.unwrap();
    assert_eq!(b["_TxId"], b_owner, "b kept while the writer waits: {b:?}");
    holder.commit().await.unwrap();
    let (tx, a) = writer.await.unwrap().unwrap();
    assert_eq!(a, vec![10, 10]);
    tx.commit().await.unwrap();
    assert_eq!(
        env.raw_get(&env.table, &key("b")).await.unwrap(),
        item(&[("Id", s("b")), ("v", n(9))])
    );
}

/// The reader's coordinator dies at each of its requests from its read of `a` on (before the
/// request is sent, or after it landed): releasing `b`, the looks at `a`, taking `b` back (a
/// reader done in fewer requests is abandoned holding both). Once
/// the holder commits and a sweep finishes everything, both items are unlocked with the
/// holder's values, and the reader's record is rolled back or gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_dying_at_any_request_of_its_reorder_leaves_nothing_behind() {
    reader_dying_at_any_request("ct-reorder-crash", false).await;
}

/// [`a_reader_dying_at_any_request_of_its_reorder_leaves_nothing_behind`] with
/// `Settings::reorder_keeps_turn`: the release of `b` leaves the reader's mark there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_keeping_its_turn_dying_at_any_request_of_its_reorder_leaves_nothing_behind() {
    reader_dying_at_any_request("ct-reorder-crash-turn", true).await;
}

async fn reader_dying_at_any_request(prefix: &str, keeps_turn: bool) {
    use dynamodb_transactions::fault::{FaultInjector, FaultMode};
    use dynamodb_transactions::sweeper::SweepOptions;
    let env = TestEnv::new(prefix).await;
    let faults = FaultInjector::new();
    let readers = crate::ordered_on(&env, client_with(vec![shared(faults.clone())]), |s| {
        s.reorder_held_reads = true;
        s.reorder_keeps_turn = keeps_turn;
        s.backoff_base = Duration::from_millis(1);
        s.wound_grace = Duration::from_secs(60);
        s.lock_wait = Duration::from_secs(10);
    });
    let holders = reordering(&env);
    let mut released = 0;
    for mode in [FaultMode::BeforeSend, FaultMode::AfterSend] {
        for at in 1..=6 {
            let label = format!("{mode:?} at request {at}");
            env.raw_put(&env.table, item(&[("Id", s("b")), ("v", n(10))]))
                .await;
            let holder = held_by(&env, &holders, "a").await;
            let reader = readers.begin();
            let rid = reader.id().clone();
            read_values(&reader, &env.table, ["b", "b"]).await.unwrap();
            faults.crash_at(at, mode);
            let (table, tx) = (env.table.clone(), reader);
            let waiting = tokio::spawn(async move {
                let read = read_values(&tx, &table, ["a", "a"]).await;
                tx.abandon();
                read
            });
            // Commit the holder once `b` is released or the reader is gone.
            let mut saw_release = false;
            while !waiting.is_finished() {
                let b = env.raw_get(&env.table, &key("b")).await.unwrap();
                if !b.contains_key("_TxId") {
                    saw_release = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            released += u32::from(saw_release);
            holder.commit().await.unwrap();
            let read = waiting.await.unwrap();
            if faults.struck() {
                assert!(read.is_err(), "{label}: the reader died: {read:?}");
            } else {
                // Done in fewer requests (the holder committed early): abandoned holding both.
                assert_eq!(read.unwrap(), vec![2, 2], "{label}");
            }
            faults.disarm();
            let report = env
                .manager
                .sweep(&SweepOptions::finish_everything_now().tables_to_scan([env.table.clone()]))
                .await
                .unwrap();
            assert!(report.errors.is_empty(), "{label}: {report:?}");
            for (k, v) in [("a", 2), ("b", 10)] {
                assert_eq!(
                    env.raw_get(&env.table, &key(k)).await.unwrap(),
                    item(&[("Id", s(k)), ("v", n(v))]),
                    "{label}"
                );
            }
            match env.tx_state(&rid).await {
                None | Some((TxState::RolledBack, true)) => {}
                other => panic!("{label}: the reader's record: {other:?}"),
            }
        }
    }
    assert!(released > 0, "no run reached the release of b");
}
