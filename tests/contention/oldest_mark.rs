//! The oldest waiter's mark (`Settings::mark_oldest_waiter`): a waiter writes its ticket on the
//! item it waits for (`_TxH`) when no older live mark is there, and a younger or ticketless lock
//! attempt is refused while the mark lives; a lock that passes the mark removes it.

use std::time::Duration;

use dynamodb_transactions::fault::{FaultInjector, FaultMode, LateDelivery, RequestCounter};
use dynamodb_transactions::{Item, TicketSource, Transaction, TransactionManager};

use crate::common::*;
use crate::queue::crashed_waiter::{dead_waiter_returned, start_dying_waiter, sweep_settles};
use crate::{held_by, lock, ordered_on, set_v, ticket_of};

/// A manager over the env's tables on `client` that marks (tickets at begin, from the counter).
pub(crate) fn marking(env: &TestEnv, client: aws_sdk_dynamodb::Client) -> TransactionManager {
    let m = &env.manager;
    marking_over(m.transactions_table(), m.images_table(), client)
}

/// [`marking`] over the tables named.
pub(crate) fn marking_over(
    txt: &str,
    imgt: &str,
    client: aws_sdk_dynamodb::Client,
) -> TransactionManager {
    marking_tuned(txt, imgt, client, |_| {})
}

/// [`marking_over`], then `more`.
pub(crate) fn marking_tuned(
    txt: &str,
    imgt: &str,
    client: aws_sdk_dynamodb::Client,
    more: impl FnOnce(&mut dynamodb_transactions::Settings),
) -> TransactionManager {
    TransactionManager::builder(client)
        .transactions_table(txt)
        .images_table(imgt)
        .configure(|s| {
            s.rollback_on_drop = false;
            s.contention = dynamodb_transactions::ContentionPolicy::Ordered {
                dead_after: Duration::from_secs(30),
                ticket_at_begin: true,
            };
            s.ticket_source = TicketSource::Counter;
            s.mark_oldest_waiter = true;
            s.record_on_demand = false;
            s.lock_wait = Duration::from_secs(20);
            s.wound_grace = Duration::from_secs(60);
            more(s);
        })
        .build()
}

/// The mark `k` carries: (ticket, expiry).
pub(crate) async fn mark_on(env: &TestEnv, k: &str) -> Option<(u64, u64)> {
    let raw = env.raw_get(&env.table, &key(k)).await?;
    let m = raw.get("_TxH")?.as_m().ok()?;
    let num = |f: &str| m[f].as_n().unwrap().parse().unwrap();
    Some((num("t"), num("e")))
}

/// Waits until `k` carries a mark, and checks that it is `waiter`'s.
pub(crate) async fn marked_by(env: &TestEnv, k: &str, waiter: &dynamodb_transactions::TxId) {
    let mine = loop {
        if let Some((t, _)) = mark_on(env, k).await {
            break t;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(mine, ticket_of(env, waiter).await, "the waiter's mark");
}

/// The mark of `ticket` expiring `in_ms` from now (negative: expired), as an item carries it,
/// and its expiry (epoch ms).
pub(crate) fn mark_value(
    ticket: u64,
    in_ms: i64,
) -> (aws_sdk_dynamodb::types::AttributeValue, i64) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let e = now + in_ms;
    let m = [("t".to_string(), n(ticket as i64)), ("e".to_string(), n(e))];
    (aws_sdk_dynamodb::types::AttributeValue::M(m.into()), e)
}

/// `k` with `v`, carrying the mark of `ticket` expiring `in_ms` from now (negative: expired).
pub(crate) fn marked_item(k: &str, v: i64, ticket: u64, in_ms: i64) -> Item {
    let mut i = item(&[("Id", s(k)), ("v", n(v))]);
    i.insert("_TxH".into(), mark_value(ticket, in_ms).0);
    i
}

pub(crate) async fn read_v(tx: &Transaction, table: &str, k: &str) -> i64 {
    let out = tx
        .get_item()
        .table_name(table)
        .key("Id", s(k))
        .send()
        .await
        .unwrap();
    out.item().unwrap()["v"].as_n().unwrap().parse().unwrap()
}

/// Sets `v` of `k` in `tx` (buffered).
pub(crate) async fn set_i(tx: &Transaction, table: &str, k: &str, v: i64) {
    set_v(tx, table, k, v as u64).await.unwrap();
}

/// A waiter marks the item it waits for. Just before its look after the holder's commit, a
/// younger newcomer (through another coordinator) tries the free item: refused by the live mark,
/// it is still waiting half a second later, and the marked waiter then takes the item. (With the
/// lock attempts ignoring the mark, the newcomer takes it.)
#[tokio::test]
async fn the_oldest_waiter_takes_the_freed_item_ahead_of_a_younger_newcomer() {
    let env = TestEnv::new("ct-mark").await;
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    let m = marking(&env, client());
    let holder = m.begin();
    lock(&holder, &env.table, "k").await.unwrap();
    let holder_id = holder.id().clone();

    // Commits the holder, then lets a newcomer try the item for half a second: whether it got it.
    let got: std::sync::Arc<std::sync::Mutex<Option<bool>>> = Default::default();
    let (got2, table2) = (got.clone(), env.table.clone());
    let (txt, imgt) = (
        env.manager.transactions_table().to_string(),
        env.manager.images_table().to_string(),
    );
    let hook = RunBefore::unarmed("UpdateItem", move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let m = marking_over(&txt, &imgt, client());
            m.resume(&holder_id).await.unwrap().commit().await.unwrap();
            let newcomer = m.begin();
            let read = newcomer
                .get_item()
                .table_name(&table2)
                .key("Id", s("k"))
                .send();
            let took = tokio::time::timeout(Duration::from_millis(500), read).await;
            *got2.lock().unwrap() = Some(matches!(took, Ok(Ok(_))));
            newcomer.rollback().await.unwrap();
        });
    });
    let m2 = marking(&env, client_with(vec![shared(hook.clone())]));
    let waiter = m2.begin();
    let waiter_id = waiter.id().clone();
    let table = env.table.clone();
    let arm = async {
        // Younger than the holder, the waiter waits, and marks the item with its ticket.
        marked_by(&env, "k", &waiter_id).await;
        // Its next look at `k`.
        hook.arm(&[
            waiter_id.as_str(),
            &format!("\"TableName\":\"{}\"", env.table),
            "{\"S\":\"k\"}",
        ]);
    };
    let (read, ()) = tokio::join!(read_v(&waiter, &table, "k"), arm);
    assert!(hook.ran(), "the hook never ran");
    assert_eq!(
        *got.lock().unwrap(),
        Some(false),
        "the newcomer took the item ahead of the marked waiter"
    );
    assert_eq!(read, 1);
    set_i(&waiter, &table, "k", 20).await;
    waiter.commit().await.unwrap();
    assert_eq!(
        env.raw_get(&env.table, &key("k")).await.unwrap(),
        item(&[("Id", s("k")), ("v", n(20))])
    );
}

/// An expired mark refuses nobody, and the lock that passes it removes it.
#[tokio::test]
async fn an_expired_mark_refuses_no_one_and_the_lock_removes_it() {
    let env = TestEnv::new("ct-mark-exp").await;
    env.raw_put(&env.table, marked_item("k", 1, 1, -1_000))
        .await;
    let m = marking(&env, client());
    let tx = m.begin();
    assert_eq!(read_v(&tx, &env.table, "k").await, 1);
    let raw = env.raw_get(&env.table, &key("k")).await.unwrap();
    assert_eq!(raw["_TxId"], s(tx.id().as_str()), "{raw:?}");
    assert!(!raw.contains_key("_TxH"), "{raw:?}");
    set_i(&tx, &env.table, "k", 2).await;
    tx.commit().await.unwrap();
    assert_eq!(
        env.raw_get(&env.table, &key("k")).await.unwrap(),
        item(&[("Id", s("k")), ("v", n(2))])
    );
}

/// A transaction without a ticket meeting a live mark on a free item takes a ticket, waits for
/// the mark (older than any first attempt's ticket) to expire, then takes the item and removes
/// the mark.
#[tokio::test]
async fn a_ticketless_transaction_refused_by_a_live_mark_takes_a_ticket_and_waits_it_out() {
    let env = TestEnv::new("ct-mark-live").await;
    env.raw_put(&env.table, marked_item("k", 1, 1, 1_500)).await;
    let m = ordered_on(&env, client(), |s| {
        s.mark_oldest_waiter = true;
        s.lock_wait = Duration::from_secs(20);
        s.contention = dynamodb_transactions::ContentionPolicy::Ordered {
            dead_after: Duration::from_secs(30),
            ticket_at_begin: false,
        };
    });
    let tx = m.begin();
    assert_eq!(read_v(&tx, &env.table, "k").await, 1);
    let raw = env.raw_get(&env.table, &key("k")).await.unwrap();
    assert_eq!(raw["_TxId"], s(tx.id().as_str()), "{raw:?}");
    assert!(!raw.contains_key("_TxH"), "{raw:?}");
    assert!(ticket_of(&env, tx.id()).await > 1, "it took a ticket");
    tx.commit().await.unwrap();
}

/// Uncontended, a transaction sends the same requests with the setting as without it: the mark
/// is only part of the lock's condition.
#[tokio::test]
async fn marking_costs_no_request_without_contention() {
    let env = TestEnv::new("ct-mark-cost").await;
    let mut sent = Vec::new();
    for on in [false, true] {
        let k = if on { "on" } else { "off" };
        env.raw_put(&env.table, item(&[("Id", s(k)), ("v", n(1))]))
            .await;
        let counter = RequestCounter::new();
        let m = ordered_on(&env, client_with(vec![shared(counter.clone())]), |s| {
            s.mark_oldest_waiter = on;
        });
        let tx = m.begin();
        let v = read_v(&tx, &env.table, k).await;
        set_i(&tx, &env.table, k, v + 1).await;
        tx.commit().await.unwrap();
        assert_eq!(
            env.raw_get(&env.table, &key(k)).await.unwrap(),
            item(&[("Id", s(k)), ("v", n(2))])
        );
        sent.push(counter.snapshot());
    }
    assert_eq!(sent[0], sent[1]);
}

/// A waiter that marked the item and gives up (its lock wait over) takes its mark off: younger
/// transactions do not wait for it to expire.
#[tokio::test]
async fn a_waiter_that_gives_up_takes_its_mark_off() {
    let env = TestEnv::new("ct-mark-off").await;
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    let m = marking(&env, client());
    let holder = m.begin();
    lock(&holder, &env.table, "k").await.unwrap();
    let impatient = ordered_on(&env, client(), |s| {
        s.ticket_source = TicketSource::Counter;
        s.mark_oldest_waiter = true;
        s.lock_wait = Duration::from_millis(600);
        s.wound_grace = Duration::from_secs(60);
    });
    let waiter = impatient.begin();
    let table = env.table.clone();
    let waiting = waiter
        .get_item()
        .table_name(&table)
        .key("Id", s("k"))
        .send();
    let seen = async {
        loop {
            if let Some(mark) = mark_on(&env, "k").await {
                break mark;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    let (read, (mine, _)) = tokio::join!(waiting, seen);
    assert!(
        matches!(read, Err(dynamodb_transactions::Error::ItemLocked { .. })),
        "{read:?}"
    );
    assert_eq!(mine, ticket_of(&env, waiter.id()).await, "it had marked");
    assert_eq!(mark_on(&env, "k").await, None, "its mark stayed");
    waiter.rollback().await.unwrap();
    holder.commit().await.unwrap();
}

/// The coordinators of a run in which a waiter dies: holders, waiters whose requests `faults`
/// strikes, and newcomers that judge a dead transaction whose lock they meet within a second;
/// marks (and entries in the line) live 800 ms.
pub(crate) struct DyingCast {
    pub holders: TransactionManager,
    pub waiters: TransactionManager,
    pub faults: FaultInjector,
    pub newcomers: TransactionManager,
}

impl DyingCast {
    pub(crate) fn new(env: &TestEnv) -> DyingCast {
        DyingCast::with_waiters(env, |_| {})
    }

    /// [`DyingCast::new`], the dying waiters' settings then changed by `more`.
    pub(crate) fn with_waiters(
        env: &TestEnv,
        more: fn(&mut dynamodb_transactions::Settings),
    ) -> DyingCast {
        let (txt, imgt) = (
            env.manager.transactions_table().to_string(),
            env.manager.images_table().to_string(),
        );
        let short = |s: &mut dynamodb_transactions::Settings| {
            s.queue_ttl = Duration::from_millis(800);
        };
        let faults = FaultInjector::new();
        DyingCast {
            holders: marking_tuned(&txt, &imgt, client(), short),
            waiters: marking_tuned(
                &txt,
                &imgt,
                client_with(vec![shared(faults.clone())]),
                |s| {
                    short(s);
                    more(s);
                },
            ),
            faults,
            newcomers: marking_tuned(&txt, &imgt, client(), |s| {
                short(s);
                s.contention = dynamodb_transactions::ContentionPolicy::Ordered {
                    dead_after: Duration::from_secs(1),
                    ticket_at_begin: true,
                };
            }),
        }
    }
}

/// A newcomer increments `k` (at 2: the holder's increment over 1) and commits; the item ends at
/// 3 with neither lock, mark nor line.
pub(crate) async fn newcomer_increments(
    env: &TestEnv,
    newcomers: &TransactionManager,
    label: &str,
) {
    let table = &env.table;
    let newcomer = newcomers.begin();
    let v = read_v(&newcomer, table, "k").await;
    set_i(&newcomer, table, "k", v + 1).await;
    newcomer
        .commit()
        .await
        .unwrap_or_else(|e| panic!("{label}: newcomer's commit: {e}"));
    assert_eq!(
        env.raw_get(table, &key("k")).await.unwrap(),
        item(&[("Id", s("k")), ("v", n(3))]),
        "{label}: the holder's and the newcomer's increments, no lock, no mark, no line"
    );
}

/// Requests of the waiter at which it dies, one run each.
const CRASH_POINTS: u64 = 10;

/// A marked waiter dies at each of its first requests (its ticket, its record's creation with its
/// lock attempt, the holder's record read, its mark, its looks), before the request or after it
/// landed with its answer lost: the holder commits, a younger newcomer takes the item once the
/// dead waiter's mark (if it landed) has expired, the item ends with both increments and neither
/// lock nor mark, and a sweep settles the waiter's record.
async fn a_marked_waiter_dying_at_every_request(mode: FaultMode, prefix: &str) {
    let env = TestEnv::new(prefix).await;
    let table = env.table.clone();
    let DyingCast {
        holders,
        waiters,
        faults,
        newcomers,
    } = DyingCast::new(&env);
    let mut marked = 0;
    for k in 1..=CRASH_POINTS {
        let label = format!("{mode:?} at request {k}");
        env.raw_put(&table, item(&[("Id", s("k")), ("v", n(1))]))
            .await;
        let h = holders.begin();
        let v = read_v(&h, &table, "k").await;
        set_i(&h, &table, "k", v + 1).await;

        faults.crash_at(k, mode);
        let (wid, waiter) = start_dying_waiter(&waiters, &table, &faults, &label).await;
        h.commit()
            .await
            .unwrap_or_else(|e| panic!("{label}: holder: {e}"));
        dead_waiter_returned(waiter, &label).await;
        faults.disarm();
        if mark_on(&env, "k").await.is_some() {
            marked += 1;
        }

        newcomer_increments(&env, &newcomers, &label).await;
        sweep_settles(&env, &wid, &label).await;
    }
    println!("{mode:?}: {marked} runs of {CRASH_POINTS} left the mark");
    assert!(marked > 0, "{mode:?}: no run left the dead waiter's mark");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marked_waiter_dying_before_any_of_its_requests_leaves_nothing_in_the_way() {
    a_marked_waiter_dying_at_every_request(FaultMode::BeforeSend, "ct-mark-dead-before").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marked_waiter_dying_after_any_of_its_requests_landed_leaves_nothing_in_the_way() {
    a_marked_waiter_dying_at_every_request(FaultMode::AfterSend, "ct-mark-dead-after").await;
}

/// A waiter meeting a holder while an older waiter's live mark is on the item waits for that
/// mark without judging the holder: it reads no record (the marked waiter, older, judges the
/// holder), writes no mark, and gives up when its lock wait is over. (Judging the holder, it
/// read the holder's record.)
#[tokio::test]
async fn a_waiter_behind_an_older_mark_reads_no_record_of_the_holder() {
    let env = TestEnv::new("ct-mark-behind").await;
    let table = env.table.clone();
    let m = marking(&env, client());
    let holder = held_by(&env, &m, "k").await;
    // An older waiter's mark (ticket 0: older than every counter ticket), live for 10 s.
    let (mark, expiry) = mark_value(0, 10_000);
    client()
        .update_item()
        .table_name(&table)
        .set_key(Some(key("k")))
        .update_expression("SET #h = :h")
        .expression_attribute_names("#h", "_TxH")
        .expression_attribute_values(":h", mark)
        .send()
        .await
        .unwrap();

    let counter = RequestCounter::new();
    let (txt, imgt) = (m.transactions_table(), m.images_table());
    let w = marking_tuned(txt, imgt, client_with(vec![shared(counter.clone())]), |s| {
        s.lock_wait = Duration::from_millis(500);
    });
    let waiter = w.begin();
    let read = waiter
        .get_item()
        .table_name(&table)
        .key("Id", s("k"))
        .send()
        .await;
    assert!(
        matches!(read, Err(dynamodb_transactions::Error::ItemLocked { .. })),
        "{read:?}"
    );
    let sent = counter.snapshot();
    let reads = counter.get("GetItem") + counter.get("BatchGetItem");
    assert_eq!(reads, 0, "it judged the holder: {sent:?}");
    assert!(counter.get("UpdateItem") >= 2, "it looked again: {sent:?}");
    assert_eq!(
        mark_on(&env, "k").await,
        Some((0, expiry as u64)),
        "its mark"
    );
    waiter.rollback().await.unwrap();
    holder.commit().await.unwrap();
    let raw = env.raw_get(&table, &key("k")).await.unwrap();
    assert_eq!(raw["v"], n(2), "{raw:?}");
    assert!(!raw.contains_key("_TxId"), "{raw:?}");
}

/// The marked waiter's looks are conditional on its own mark, exactly as it wrote it. One of
/// them fails at once for the waiter but is held back in the network and lands only after the
/// waiter took the item with its next look, committed and released it: it takes nothing, since
/// the lock that took the item removed the mark it needs. (A look conditional only on no older
/// mark, as before, locked the released item for the finished transaction: a lock nobody holds,
/// which the next contender had to judge and release.)
#[tokio::test]
async fn a_marked_waiters_look_landing_after_its_commit_takes_nothing() {
    let env = TestEnv::new("ct-mark-late-look").await;
    let table = env.table.clone();
    let m = marking(&env, client());
    let holder = held_by(&env, &m, "k").await;

    let late = LateDelivery::new();
    let late_client = client_with_late(vec![], &late);
    let w = marking(&env, late_client.clone());
    let waiter = w.begin();
    let waiter_id = waiter.id().clone();
    let run = async {
        let v = read_v(&waiter, &table, "k").await;
        set_i(&waiter, &table, "k", v + 10).await;
        waiter.commit().await
    };
    let hold_a_look = async {
        // Marked, the waiter looks at the item over and over: hold one look back (the waiter
        // sees it fail and looks again), then free the item.
        marked_by(&env, "k", &waiter_id).await;
        late.hold("UpdateItem", 1, 1, "DescribeTable");
        while late.struck() == 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        holder.commit().await.unwrap();
    };
    let (committed, ()) = tokio::join!(run, hold_a_look);
    committed.unwrap();
    // The held look is delivered right after this request's answer.
    late_client
        .describe_table()
        .table_name(&table)
        .send()
        .await
        .unwrap();
    assert_eq!(
        env.raw_get(&table, &key("k")).await.unwrap(),
        item(&[("Id", s("k")), ("v", n(12))]),
        "the late look left a lock or a mark"
    );
}

/// A waiter whose mark's write lands but whose answer is lost, and which then stops waiting
/// without another look (its lock wait is over at once), takes the mark off: the write may have
/// landed. Each run loses the answer of another of the waiter's writes. (Taken as not marked, it
/// left the mark until it expired, and on an item no lock takes again until a sweep.)
#[tokio::test]
async fn a_waiter_whose_marks_answer_was_lost_takes_the_mark_off_when_it_gives_up() {
    let env = TestEnv::new("ct-mark-lost").await;
    let table = env.table.clone();
    let m = marking(&env, client());
    let holder = held_by(&env, &m, "k").await;
    let faults = FaultInjector::new();
    let (txt, imgt) = (m.transactions_table(), m.images_table());
    let w = marking_tuned(txt, imgt, client_with(vec![shared(faults.clone())]), |s| {
        s.lock_wait = Duration::from_millis(1);
    });
    let mut lost = 0;
    for n in 1..=4 {
        faults.fail_operation_at("UpdateItem", n, FaultMode::AfterSend);
        let waiter = w.begin();
        let read = waiter
            .get_item()
            .table_name(&table)
            .key("Id", s("k"))
            .send()
            .await;
        assert!(read.is_err(), "write {n}: {read:?}");
        if faults.struck() {
            lost += 1;
        }
        faults.disarm();
        waiter.rollback().await.unwrap();
        assert_eq!(mark_on(&env, "k").await, None, "write {n}'s answer lost");
    }
    assert!(lost > 0, "no answer was lost");
    holder.commit().await.unwrap();
    assert_eq!(
        env.raw_get(&table, &key("k")).await.unwrap(),
        item(&[("Id", s("k")), ("v", n(2))])
    );
}
