//! Handing the item over (`Settings::hand_over`, docs/PROTOCOL.md "Handing the item over"): a
//! transaction that commits with one write on the one item it locked without a record writes, in
//! that write, the lock of the item's oldest live waiter that named itself in its mark or its
//! entry in the line.

use std::time::Duration;

use dynamodb_transactions::fault::{FaultInjector, FaultMode, LateDelivery, RequestCounter};
use dynamodb_transactions::{Item, Transaction, TransactionManager, TxId};

use crate::common::*;
use crate::oldest_mark::{marking_tuned, read_v, set_i};

/// A manager over the env's tables on `client` that marks, locks a first read without a record
/// and hands items over; `more` tunes it further.
pub(crate) fn handing(
    env: &TestEnv,
    client: aws_sdk_dynamodb::Client,
    more: impl FnOnce(&mut dynamodb_transactions::Settings),
) -> TransactionManager {
    let m = &env.manager;
    marking_tuned(m.transactions_table(), m.images_table(), client, |s| {
        s.record_on_demand = true;
        s.hand_over = true;
        more(s);
    })
}

/// `k` as the table holds it.
pub(crate) async fn raw(env: &TestEnv, k: &str) -> Item {
    env.raw_get(&env.table, &key(k)).await.unwrap()
}

/// The id a map attribute `attr` of `k` (the mark, or an entry of the line) names, by ticket.
pub(crate) fn names(raw: &Item, attr: &str) -> Vec<String> {
    let Some(m) = raw.get(attr).and_then(|v| v.as_m().ok()) else {
        return vec![];
    };
    let id =
        |v: &aws_sdk_dynamodb::types::AttributeValue| v.as_m().ok()?.get("i")?.as_s().ok().cloned();
    match attr {
        "_TxH" => m
            .get("i")
            .and_then(|i| i.as_s().ok())
            .cloned()
            .into_iter()
            .collect(),
        _ => m.values().filter_map(id).collect(),
    }
}

/// Waits until `check` holds of `k`.
pub(crate) async fn until(
    env: &TestEnv,
    k: &str,
    what: &str,
    check: impl Fn(&Item) -> bool,
) -> Item {
    let started = std::time::Instant::now();
    loop {
        let item = raw(env, k).await;
        if check(&item) {
            return item;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{what}: {item:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn owner(item: &Item) -> Option<&str> {
    item.get("_TxId")
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
}

/// A call of a waiter or a holder, spawned.
pub(crate) type Call<T> = tokio::task::JoinHandle<T>;

/// Two holders in turn at `k`, put at 1, each locking it without a record: the first holds it,
/// its increment to 2 buffered; the second waits for it, marked. The first, and the second's
/// read, which returns the second with what it read.
async fn two_holders(
    env: &TestEnv,
    holders: &TransactionManager,
) -> (Transaction, Call<(Transaction, i64)>) {
    let table = env.table.clone();
    env.raw_put(&table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    let first = holders.begin();
    assert_eq!(read_v(&first, &table, "k").await, 1);
    set_i(&first, &table, "k", 2).await;
    let second = holders.begin();
    let second_id = second.id().clone();
    let second_read = tokio::spawn(async move {
        let v = read_v(&second, &table, "k").await;
        (second, v)
    });
    until(env, "k", "the second holder marks", |i| {
        names(i, "_TxH") == [second_id.to_string()]
    })
    .await;
    (first, second_read)
}

/// A waiter of `waiters` that reads `k` (locked), then runs `then` with itself, the table and
/// what it read; spawned.
pub(crate) fn waiter_reads<T, F, Fut>(
    env: &TestEnv,
    waiters: &TransactionManager,
    then: F,
) -> (TxId, Call<T>)
where
    F: FnOnce(Transaction, String, Result<i64, dynamodb_transactions::Error>) -> Fut
        + Send
        + 'static,
    Fut: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let waiter = waiters.begin();
    let (wid, table) = (waiter.id().clone(), env.table.clone());
    let call = tokio::spawn(async move {
        let read = waiter
            .get_item()
            .table_name(&table)
            .key("Id", s("k"))
            .send()
            .await
            .map(|out| out.item().unwrap()["v"].as_n().unwrap().parse().unwrap());
        then(waiter, table, read).await
    });
    (wid, call)
}

/// A waiter of `waiters` that reads `k` (locked), writes what it read + 1 and commits, spawned:
/// its id, and its call, which returns what it read.
pub(crate) fn incrementing_waiter(
    env: &TestEnv,
    waiters: &TransactionManager,
) -> (TxId, Call<i64>) {
    waiter_reads(env, waiters, |w, table, read| async move {
        let v = read.unwrap();
        set_i(&w, &table, "k", v + 1).await;
        w.commit().await.unwrap();
        v
    })
}

/// Once `waiter` is in the line behind the second holder (and the second holder's looks have
/// seen it), the first holder commits: the second takes the item, making the waiter the mark.
/// The second, holding `k` at 2.
async fn second_takes(
    env: &TestEnv,
    first: Transaction,
    second_read: Call<(Transaction, i64)>,
    waiter: &TxId,
) -> Transaction {
    until(env, "k", "the waiter joins the line", |i| {
        names(i, "_TxHL") == [waiter.to_string()]
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    first.commit().await.unwrap();
    let (second, v) = second_read.await.unwrap();
    assert_eq!(v, 2);
    second
}

/// Waits until `faults` struck.
async fn struck(faults: &FaultInjector, label: &str) {
    let started = std::time::Instant::now();
    while !faults.struck() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{label}: never struck"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// A waiter's read that gives up, whatever it read: its call returns how the read went.
async fn abandons(
    waiter: Transaction,
    _: String,
    read: Result<i64, dynamodb_transactions::Error>,
) -> Result<(), dynamodb_transactions::Error> {
    waiter.abandon();
    read.map(|_| ())
}

/// The stage of a handover ([`two_holders`], [`second_takes`]): a waiter behind the two, which
/// named itself in the line and which the second holder's lock made the mark, then dies: every
/// request of it fails from then on. Returns the second holder (its increment to 3 buffered),
/// the waiter's id and ticket, and the waiter's call.
struct Staged {
    second: Transaction,
    waiter: TxId,
    ticket: aws_sdk_dynamodb::types::AttributeValue,
    dying: Call<Result<(), dynamodb_transactions::Error>>,
}

async fn stage(env: &TestEnv, holders: &TransactionManager) -> Staged {
    let faults = FaultInjector::new();
    let waiters = handing(env, client_with(vec![shared(faults.clone())]), |_| {});
    let (first, second_read) = two_holders(env, holders).await;
    let (wid, dying) = waiter_reads(env, &waiters, abandons);
    let second = second_takes(env, first, second_read, &wid).await;
    let held = raw(env, "k").await;
    assert_eq!(owner(&held), Some(second.id().as_str()));
    let ticket = held["_TxH"].as_m().unwrap()["t"].clone();
    // Dead once a request of it failed: none of its is in flight then (it looks one at a time).
    faults.crash_at(1, FaultMode::BeforeSend);
    struck(&faults, "the waiter").await;
    set_i(&second, &env.table, "k", 3).await;
    Staged {
        second,
        waiter: wid,
        ticket,
        dying,
    }
}

/// The dead waiter's call ends with an error.
async fn dead_returned(dying: tokio::task::JoinHandle<Result<(), dynamodb_transactions::Error>>) {
    let r = tokio::time::timeout(Duration::from_secs(30), dying)
        .await
        .unwrap()
        .unwrap();
    assert!(r.is_err(), "a dead waiter returned {r:?}");
}

/// The second holder's commit ([`stage`]) hands the item to the waiter, dead as it is: the
/// table shows the update applied and the item locked by the waiter, with its ticket, and
/// neither mark nor line. A newcomer then releases the dead waiter's lock after its grace and
/// increments the item. (Without the handover the commit left the item unlocked.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_hands_the_item_to_the_waiter_that_named_itself_even_a_dead_one() {
    let env = TestEnv::new("ct-hand-dead").await;
    let table = env.table.clone();
    let holders = handing(&env, client(), |_| {});
    let Staged {
        second,
        waiter,
        ticket,
        dying,
    } = stage(&env, &holders).await;
    second.commit().await.unwrap();
    let handed = raw(&env, "k").await;
    assert_eq!(owner(&handed), Some(waiter.as_str()), "{handed:?}");
    assert_eq!(handed["v"], n(3), "the update applied in the same write");
    assert_eq!(handed.get("_TxK"), Some(&ticket), "the waiter's ticket");
    assert!(
        !handed.contains_key("_TxH") && !handed.contains_key("_TxHL"),
        "{handed:?}"
    );
    dead_returned(dying).await;

    // Met by a newcomer, the dead waiter's lock is released after its grace.
    let newcomers = handing(&env, client(), |s| {
        s.contention = dynamodb_transactions::ContentionPolicy::Ordered {
            dead_after: Duration::from_secs(1),
            ticket_at_begin: true,
        };
        s.wound_grace = Duration::from_millis(300);
        s.hand_over = false;
    });
    let newcomer = newcomers.begin();
    assert_eq!(read_v(&newcomer, &table, "k").await, 3);
    set_i(&newcomer, &table, "k", 4).await;
    newcomer.commit().await.unwrap();
    assert_eq!(raw(&env, "k").await, item(&[("Id", s("k")), ("v", n(4))]));
}

/// A holder whose view names a waiter whose mark has gone since ([`stage`], the dead waiter's
/// mark then taken off) sends its commit with the handover, refused, then as a plain unlock:
/// two `UpdateItem`s, and the item ends updated and free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handover_refused_because_its_waiter_left_commits_as_a_plain_unlock() {
    let env = TestEnv::new("ct-hand-left").await;
    let counter = RequestCounter::new();
    let holders = handing(&env, client_with(vec![shared(counter.clone())]), |_| {});
    let staged = stage(&env, &holders).await;
    client()
        .update_item()
        .table_name(&env.table)
        .set_key(Some(key("k")))
        .update_expression("REMOVE #h")
        .expression_attribute_names("#h", "_TxH")
        .send()
        .await
        .unwrap();
    counter.reset();
    staged.second.commit().await.unwrap();
    assert_eq!(counter.get("UpdateItem"), 2, "{:?}", counter.snapshot());
    assert_eq!(raw(&env, "k").await, item(&[("Id", s("k")), ("v", n(3))]));
    dead_returned(staged.dying).await;
}

/// A waiter handed the item takes it at its next look and runs on: two holders in turn with a
/// live waiter, every increment lands, and the item ends free, with neither mark nor line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_waiter_handed_the_item_takes_it_at_its_next_look() {
    let env = TestEnv::new("ct-hand-live").await;
    let table = env.table.clone();
    env.raw_put(&table, item(&[("Id", s("k")), ("v", n(0))]))
        .await;
    let m = handing(&env, client(), |_| {});
    tasks_increment_one_counter(&m, &table, 6, 5).await;
    assert_eq!(raw(&env, "k").await, item(&[("Id", s("k")), ("v", n(30))]));
}

/// `tasks` tasks sharing the manager `m` increment `k` of `table` `each` times through `run`.
async fn tasks_increment_one_counter(
    m: &TransactionManager,
    table: &str,
    tasks: usize,
    each: usize,
) {
    let tasks = (0..tasks).map(|_| async move {
        for _ in 0..each {
            m.run(async |tx| {
                let v = read_v(tx, table, "k").await;
                set_i(tx, table, "k", v + 1).await;
                Ok(())
            })
            .await
            .unwrap();
        }
    });
    futures::future::join_all(tasks).await;
}

/// A holder that hands the item to a waiter of its own manager tells it in process. Two
/// holders in turn, then two waiters, all of one manager: the second holder (which took the
/// item by its own look) hands it to the first waiter, and the second waiter, behind a lock
/// that was handed over, waits for it in process (it watched for the next handover by reads
/// before waiters waited in process). From then on no `GetItem` of the manager would come back,
/// and none is sent. The first waiter commits 4, handing the item to the second, which
/// takes it from that commit's answer and runs on: it read 4, and the item ends at 5, free.
/// (Before, a waiter learnt of a handover only from its reads, and waited here for the gate.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_of_the_holders_manager_is_told_the_handover_without_a_read() {
    let env = TestEnv::new("ct-hand-told").await;
    let late = LateDelivery::new();
    let m = handing(&env, client_with_late(vec![], &late), |_| {});
    let (first, second_read) = two_holders(&env, &m).await;
    let (go, gone) = tokio::sync::oneshot::channel::<()>();
    let (w1, first_waiter) = waiter_reads(&env, &m, |waiter, table, read| async move {
        let v = read.unwrap();
        gone.await.unwrap();
        set_i(&waiter, &table, "k", v + 1).await;
        waiter.commit().await.unwrap();
        v
    });
    let second = second_takes(&env, first, second_read, &w1).await;
    let (w2, second_waiter) = incrementing_waiter(&env, &m);
    until(&env, "k", "the second waiter joins the line", |i| {
        names(i, "_TxHL") == [w2.to_string()]
    })
    .await;
    set_i(&second, &env.table, "k", 3).await;
    second.commit().await.unwrap();
    until(&env, "k", "the first waiter is handed the item", |i| {
        owner(i) == Some(w1.as_str())
    })
    .await;
    late.delay_all_until_opened("GetItem");
    tokio::time::sleep(Duration::from_millis(100)).await;
    go.send(()).unwrap();
    assert_eq!(first_waiter.await.unwrap(), 3);
    let read = tokio::time::timeout(Duration::from_secs(10), second_waiter).await;
    let reads = late.struck();
    late.open();
    assert_eq!(read.expect("the second waiter was not told").unwrap(), 4);
    assert_eq!(
        reads, 0,
        "a waiter behind a holder of its own manager reads nothing"
    );
    assert_eq!(raw(&env, "k").await, item(&[("Id", s("k")), ("v", n(5))]));
}

/// Ten tasks sharing one manager increment one counter eight times each through `run`, every
/// request through `client`; the item ends at 80, free, with neither mark nor line.
async fn ten_tasks_increment_one_counter(env: &TestEnv, client: aws_sdk_dynamodb::Client) {
    let table = env.table.clone();
    env.raw_put(&table, item(&[("Id", s("k")), ("v", n(0))]))
        .await;
    let m = handing(env, client, |s| s.lock_wait = Duration::from_secs(30));
    tasks_increment_one_counter(&m, &table, 10, 8).await;
    assert_eq!(raw(env, "k").await, item(&[("Id", s("k")), ("v", n(80))]));
}

/// Tasks of one process told their handovers, with the network in the way: every request
/// delayed up to 40 ms a third of the time, so that notices, watching reads and lock attempts
/// cross. Every increment lands once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_of_one_manager_told_their_handovers_across_a_slow_network_lose_nothing() {
    let env = TestEnv::new("ct-hand-told-slow").await;
    let delays = dynamodb_transactions::fault::Delayer::new(0.33, Duration::from_millis(40), 7);
    ten_tasks_increment_one_counter(&env, client_with_delays(vec![], Some(&delays))).await;
    assert!(delays.injected() > 0);
}

/// A commit without record whose first send landed, and which the SDK sent again on its own
/// (here 3% of answers turned into `ThrottlingException` after the request was applied, which
/// the SDK retries), meets its own lock gone: with no tombstone for it, it committed. Every
/// increment lands once. (Taken as rolled back, `run` ran such a unit of work again and the
/// counter ended at 81–86; with `record_on_demand` off it did not happen.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_without_record_the_sdk_resent_after_it_landed_is_not_run_twice() {
    let env = TestEnv::new("ct-hand-resent").await;
    let throttle = dynamodb_transactions::fault::Throttler::new(0.03, 11);
    ten_tasks_increment_one_counter(&env, client_with(vec![shared(throttle.clone())])).await;
    assert!(throttle.injected() > 0);
}

/// Marks and entries in the line live 800 ms.
fn short(s: &mut dynamodb_transactions::Settings) {
    s.queue_ttl = Duration::from_millis(800);
}

/// Newcomers that release a dead transaction's lock without record after 300 ms.
fn newcomers(env: &TestEnv) -> TransactionManager {
    handing(env, client(), |s| {
        short(s);
        s.contention = dynamodb_transactions::ContentionPolicy::Ordered {
            dead_after: Duration::from_secs(1),
            ticket_at_begin: true,
        };
        s.wound_grace = Duration::from_millis(300);
        s.hand_over = false;
    })
}

/// A newcomer increments `k`, at `v`, and the item ends at `v + 1` with neither lock, mark nor
/// line.
async fn newcomer_increments(env: &TestEnv, newcomers: &TransactionManager, v: i64, label: &str) {
    let newcomer = newcomers.begin();
    assert_eq!(read_v(&newcomer, &env.table, "k").await, v, "{label}");
    set_i(&newcomer, &env.table, "k", v + 1).await;
    newcomer
        .commit()
        .await
        .unwrap_or_else(|e| panic!("{label}: newcomer: {e}"));
    assert_eq!(
        raw(env, "k").await,
        item(&[("Id", s("k")), ("v", n(v + 1))]),
        "{label}: no lock, mark nor line"
    );
}

/// Requests of the dying coordinator at which it dies, one run each.
const CRASH_POINTS: u64 = 10;

/// A waiter that takes handovers dies at each of its first requests (its ticket, its lock
/// attempt, its entry in the line, its reads), before the request or after it landed with its
/// answer lost. The first holder commits; the second (the marked waiter) takes the item, making
/// the dead waiter the mark if its entry is there, and commits, handing it the item if its
/// mark is there; a newcomer then increments the item, releasing a lock handed to the dead
/// waiter after its grace. The item ends with the three increments and neither lock, mark nor
/// line.
async fn a_waiter_taking_handovers_dying_at_every_request(mode: FaultMode, prefix: &str) {
    let env = TestEnv::new(prefix).await;
    let table = env.table.clone();
    let holders = handing(&env, client(), short);
    let faults = FaultInjector::new();
    let waiters = handing(&env, client_with(vec![shared(faults.clone())]), short);
    let newcomers = newcomers(&env);
    let mut handed = 0;
    for k in 1..=CRASH_POINTS {
        let label = format!("{mode:?} at request {k}");
        let (first, second_read) = two_holders(&env, &holders).await;
        faults.crash_at(k, mode);
        let (wid, dying) = waiter_reads(&env, &waiters, abandons);
        struck(&faults, &label).await;
        first
            .commit()
            .await
            .unwrap_or_else(|e| panic!("{label}: first: {e}"));
        let (second, v) = second_read.await.unwrap();
        assert_eq!(v, 2, "{label}");
        set_i(&second, &table, "k", 3).await;
        second
            .commit()
            .await
            .unwrap_or_else(|e| panic!("{label}: second: {e}"));
        dead_returned(dying).await;
        faults.disarm();
        if owner(&raw(&env, "k").await) == Some(wid.as_str()) {
            handed += 1;
        }
        // The dead waiter's mark and entry expire.
        tokio::time::sleep(Duration::from_millis(900)).await;
        newcomer_increments(&env, &newcomers, 3, &label).await;
    }
    println!("{mode:?}: {handed} runs of {CRASH_POINTS} handed the dead waiter the item");
    assert!(
        handed > 0,
        "{mode:?}: no run handed the dead waiter the item"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_taking_handovers_dying_before_any_of_its_requests_leaves_nothing_in_the_way() {
    a_waiter_taking_handovers_dying_at_every_request(FaultMode::BeforeSend, "ct-hand-wd-before")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_taking_handovers_dying_after_any_of_its_requests_leaves_nothing_in_the_way() {
    a_waiter_taking_handovers_dying_at_every_request(FaultMode::AfterSend, "ct-hand-wd-after")
        .await;
}

/// A holder dies at its commit's write, which hands the item over: before it is sent, or after
/// it landed with its answer lost. A live waiter (the one it would hand the item to) then takes
/// the item: handed over when the write landed, or, when it did not, once it released the dead
/// holder's lock without record after its grace. It increments what it read: the item ends with
/// the holder's increment exactly when the write landed, and with neither lock, mark nor line.
async fn a_holder_dying_at_its_handover(mode: FaultMode, prefix: &str) {
    let env = TestEnv::new(prefix).await;
    let table = env.table.clone();
    let faults = FaultInjector::new();
    let holders = handing(&env, client_with(vec![shared(faults.clone())]), short);
    let waiters = handing(&env, client(), |s| {
        short(s);
        s.wound_grace = Duration::from_millis(300);
        s.contention = dynamodb_transactions::ContentionPolicy::Ordered {
            dead_after: Duration::from_secs(1),
            ticket_at_begin: true,
        };
    });
    // A holder that sees its waiter: its lock made the waiter the mark.
    let (first, second_read) = two_holders(&env, &holders).await;
    let (wid, waiting) = waiter_reads(&env, &waiters, |waiter, table, read| async move {
        let v = read?;
        set_i(&waiter, &table, "k", v + 10).await;
        waiter.commit().await.map(|_| v)
    });
    let second = second_takes(&env, first, second_read, &wid).await;
    set_i(&second, &table, "k", 3).await;
    faults.crash_at_operation("UpdateItem", 1, mode);
    let r = second.commit().await;
    assert!(r.is_err(), "{mode:?}: a dead holder committed: {r:?}");
    let read = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap_or_else(|e| panic!("{mode:?}: waiter: {e}"));
    let landed = mode == FaultMode::AfterSend;
    assert_eq!(
        read,
        if landed { 3 } else { 2 },
        "{mode:?}: what the waiter read"
    );
    assert_eq!(
        raw(&env, "k").await,
        item(&[("Id", s("k")), ("v", n(read + 10))]),
        "{mode:?}: no lock, mark nor line"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_dying_before_its_handover_is_sent_leaves_nothing_in_the_way() {
    a_holder_dying_at_its_handover(FaultMode::BeforeSend, "ct-hand-hd-before").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_dying_after_its_handover_landed_leaves_nothing_in_the_way() {
    a_holder_dying_at_its_handover(FaultMode::AfterSend, "ct-hand-hd-after").await;
}

/// A waiter that named itself gives up (its lock wait is over) while the item is held; the
/// holder's commit hands it the item just before the waiter takes its mark off (a hook runs the
/// commit before that request). The mark is gone, so the waiter looks once more, finds the item
/// handed to it and releases it: the item ends with the holder's increment, unlocked. (Without
/// that look the item stayed locked by the waiter, which nobody would commit.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_releases_the_item_handed_to_it_meanwhile() {
    let env = TestEnv::new("ct-hand-gives-up").await;
    let table = env.table.clone();
    let holders = handing(&env, client(), |_| {});
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let hook = RunBefore::unarmed("UpdateItem", move || {
        go_tx.send(()).unwrap();
        // Never for good: a test that failed meanwhile must not hold the runtime.
        let _ = done_rx.recv_timeout(Duration::from_secs(30));
    });
    let (txt, imgt) = (
        env.manager.transactions_table().to_string(),
        env.manager.images_table().to_string(),
    );
    let waiters = marking_tuned(&txt, &imgt, client_with(vec![shared(hook.clone())]), |s| {
        s.record_on_demand = true;
        s.hand_over = true;
        s.lock_wait = Duration::from_secs(4);
        s.queue_ttl = Duration::from_secs(60);
    });
    // The waiter's mark taken off, when it gives up (its only write that is just that): the
    // second holder commits first. Armed before the waiter starts, so that its deadline cannot
    // pass before (its other writes to the mark name the line too).
    hook.arm(&["\"REMOVE #_TxH\""]);
    let (first, second_read) = two_holders(&env, &holders).await;
    // The waiter on a runtime of its own: the hook blocks its thread, and nothing else may be
    // waiting on that thread (through the profile, the holder's commit did for the hook's 30 s).
    let waiter = waiters.begin();
    let (wid, t) = (waiter.id().clone(), table.clone());
    let giving_up = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // How its read ended: gave up (`ItemLocked`), as it should, or what else.
        rt.block_on(async move {
            let read = waiter.get_item().table_name(&t).key("Id", s("k")).send();
            match read.await {
                Err(dynamodb_transactions::Error::ItemLocked { .. }) => None,
                other => Some(format!("{other:?}")),
            }
        })
    });
    let second = second_takes(&env, first, second_read, &wid).await;
    set_i(&second, &table, "k", 3).await;
    let gave_up = tokio::task::spawn_blocking(move || go_rx.recv_timeout(Duration::from_secs(30)));
    gave_up.await.unwrap().expect("the waiter never gave up");
    second.commit().await.unwrap();
    assert_eq!(
        owner(&raw(&env, "k").await),
        Some(wid.as_str()),
        "handed over"
    );
    done_tx.send(()).unwrap();
    let r = tokio::task::spawn_blocking(move || giving_up.join().unwrap())
        .await
        .unwrap();
    assert_eq!(r, None, "it did not give up");
    assert_eq!(raw(&env, "k").await, item(&[("Id", s("k")), ("v", n(3))]));
}
