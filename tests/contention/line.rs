//! The line behind the oldest waiter's mark (`_TxHL`, docs/PROTOCOL.md "The line behind the
//! mark"): a waiter that finds an older live mark puts its entry in the item's line, and the lock
//! that takes the item makes the line's next waiter the mark, so that the item's next holder is
//! marked before the item is free again.

use std::collections::BTreeMap;
use std::time::Duration;

use dynamodb_transactions::fault::FaultMode;
use dynamodb_transactions::sweeper::SweepOptions;

use crate::common::*;
use crate::oldest_mark::{
    DyingCast, mark_on, mark_value, marked_by, marking, marking_tuned, newcomer_increments, read_v,
    set_i,
};
use crate::queue::crashed_waiter::{dead_waiter_returned, start_dying_waiter, sweep_settles};
use crate::{held_by, ticket_of};

/// The line `k` carries: ticket → expiry (`None`: no line at all).
async fn line_on(env: &TestEnv, k: &str) -> Option<BTreeMap<u64, u64>> {
    let raw = env.raw_get(&env.table, &key(k)).await?;
    let m = raw.get("_TxHL")?.as_m().ok()?;
    Some(
        m.iter()
            .map(|(t, e)| (t.parse().unwrap(), e.as_n().unwrap().parse().unwrap()))
            .collect(),
    )
}

/// Waits until `k`'s line holds an entry, and returns the line.
async fn joined(env: &TestEnv, k: &str) -> BTreeMap<u64, u64> {
    let started = std::time::Instant::now();
    loop {
        if let Some(line) = line_on(env, k).await.filter(|l| !l.is_empty()) {
            return line;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "nobody joined the line"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Puts an older waiter's live entry (ticket 0) in `k`'s line, live for `in_ms` (the line must
/// not be there).
async fn stage_line_entry(env: &TestEnv, k: &str, in_ms: u64) {
    let expiry = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + in_ms;
    client()
        .update_item()
        .table_name(&env.table)
        .set_key(Some(key(k)))
        .update_expression("SET #l = :l")
        .expression_attribute_names("#l", "_TxHL")
        .expression_attribute_values(
            ":l",
            aws_sdk_dynamodb::types::AttributeValue::M([("0".to_string(), n(expiry))].into()),
        )
        .send()
        .await
        .unwrap();
}

/// Puts an older waiter's live mark (ticket 0) on `k`, live for `in_ms`.
async fn stage_mark(env: &TestEnv, k: &str, in_ms: i64) {
    client()
        .update_item()
        .table_name(&env.table)
        .set_key(Some(key(k)))
        .update_expression("SET #h = :h")
        .expression_attribute_names("#h", "_TxH")
        .expression_attribute_values(":h", mark_value(0, in_ms).0)
        .send()
        .await
        .unwrap();
}

/// A waiter that meets a holder behind an older waiter's live mark puts its entry in the
/// item's line (its ticket, expiring `queue_ttl` after it wrote it), and takes it out when it
/// stops waiting. (Without the line it only backed off.)
#[tokio::test]
async fn a_waiter_behind_an_older_mark_joins_the_line_and_leaves_it_when_it_gives_up() {
    let env = TestEnv::new("ct-line-join").await;
    let table = env.table.clone();
    let m = marking(&env, client());
    let holder = held_by(&env, &m, "k").await;
    stage_mark(&env, "k", 10_000).await;

    let w = marking_tuned(
        env.manager.transactions_table(),
        env.manager.images_table(),
        client(),
        |s| s.lock_wait = Duration::from_millis(1_500),
    );
    let waiter = w.begin();
    let wid = waiter.id().clone();
    let mut mine = 0;
    let read = async {
        waiter
            .get_item()
            .table_name(&table)
            .key("Id", s("k"))
            .send()
            .await
    };
    let watch = async {
        let line = joined(&env, "k").await;
        mine = ticket_of(&env, &wid).await;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let left = line[&mine].saturating_sub(now);
        assert!(
            left > 1_000,
            "its entry expires in {left} ms (queue_ttl 3 s)"
        );
        assert_eq!(line.len(), 1, "{line:?}");
    };
    let (read, ()) = tokio::join!(read, watch);
    assert!(
        matches!(read, Err(dynamodb_transactions::Error::ItemLocked { .. })),
        "{read:?}"
    );
    // Its entry was the line's last: the line goes with it (an empty map left on the item is
    // litter, and DynamoDB Local's stream writes it as a value of no type, which no reader of
    // the stream can parse).
    assert_eq!(
        line_on(&env, "k").await,
        None,
        "its entry, or an empty line, stayed"
    );
    assert_eq!(mark_on(&env, "k").await.map(|m| m.0), Some(0), "the mark");
    waiter.rollback().await.unwrap();
    holder.commit().await.unwrap();
}

/// Three transactions on one item, in ticket order: a holder, an older waiter that marks the
/// item, and a younger one that joins the line behind that mark. The lock with which the marked
/// waiter takes the item makes the younger one the mark in the same write, and takes its entry
/// out of the line: the younger waiter is marked while the item is still held, before anyone can
/// take it. It takes the item next, and its lock, with nobody left to promote, leaves neither
/// mark nor line.
#[tokio::test]
async fn the_lock_that_takes_the_item_marks_the_next_waiter_in_the_line() {
    let env = TestEnv::new("ct-line-promote").await;
    let table = env.table.clone();
    let m = marking(&env, client());
    let holder = held_by(&env, &m, "k").await;
    let older = m.begin();
    let younger = m.begin();
    let (older_id, younger_id) = (older.id().clone(), younger.id().clone());

    let first = async {
        let v = read_v(&older, &table, "k").await;
        // Holding the item: the younger waiter is the mark already, and out of the line.
        let (older_t, younger_t) = (
            ticket_of(&env, &older_id).await,
            ticket_of(&env, &younger_id).await,
        );
        assert!(older_t < younger_t);
        assert_eq!(
            mark_on(&env, "k").await.map(|m| m.0),
            Some(younger_t),
            "the lock that took the item did not mark the next waiter"
        );
        assert_eq!(
            line_on(&env, "k").await,
            None,
            "the younger waiter's entry, or an empty line, stayed"
        );
        set_i(&older, &table, "k", v + 10).await;
        older.commit().await.unwrap();
    };
    let second = async {
        // Behind the older waiter's mark.
        marked_by(&env, "k", &older_id).await;
        let v = read_v(&younger, &table, "k").await;
        set_i(&younger, &table, "k", v + 100).await;
        younger.commit().await.unwrap();
    };
    let release = async {
        marked_by(&env, "k", &older_id).await;
        let line = joined(&env, "k").await;
        assert_eq!(
            line.keys().copied().collect::<Vec<_>>(),
            vec![ticket_of(&env, &younger_id).await],
            "the younger waiter's entry"
        );
        holder.commit().await.unwrap();
    };
    tokio::join!(first, second, release);
    assert_eq!(
        env.raw_get(&table, &key("k")).await.unwrap(),
        item(&[("Id", s("k")), ("v", n(112))]),
        "the three writes in order, and neither lock, mark nor line"
    );
}

/// With `line_looks_read`, a waiter with another waiter between it and the mark looks by
/// reading: while the item is held and it stays second in the line, its looks are `GetItem`s and
/// it writes nothing to the item (without it, or on the code before, every look is a lock
/// attempt, an `UpdateItem` refused on the hot item, each billed a write unit: 271 in the same
/// 800 ms on DynamoDB Local). Once the waiter ahead of it takes the item and the lock marks it,
/// it takes the item in its turn.
#[tokio::test]
async fn a_waiter_far_back_in_the_line_looks_by_reading() {
    let env = TestEnv::new("ct-line-read").await;
    let table = env.table.clone();
    let m = marking(&env, client());
    let holder = held_by(&env, &m, "k").await;
    // An older waiter's mark, which expires after a while (its waiter is gone).
    stage_mark(&env, "k", 2_500).await;
    let ahead = m.begin();
    let counter = dynamodb_transactions::fault::RequestCounter::new();
    let counted = marking_tuned(
        env.manager.transactions_table(),
        env.manager.images_table(),
        client_with(vec![shared(counter.clone())]),
        |s| s.line_looks_read = true,
    );
    let behind = counted.begin();

    let first = async {
        let v = read_v(&ahead, &table, "k").await;
        set_i(&ahead, &table, "k", v + 10).await;
        ahead.commit().await.unwrap();
    };
    let second = async {
        // Behind the first waiter's entry.
        joined(&env, "k").await;
        let v = read_v(&behind, &table, "k").await;
        set_i(&behind, &table, "k", v + 100).await;
        behind.commit().await.unwrap();
    };
    let watch = async {
        let started = std::time::Instant::now();
        while line_on(&env, "k").await.is_none_or(|l| l.len() < 2) {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "no line of two"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        counter.reset();
        tokio::time::sleep(Duration::from_millis(800)).await;
        let sent = counter.snapshot();
        assert!(
            counter.get("UpdateItem") <= 1,
            "it wrote to look (an entry's renewal aside): {sent:?}"
        );
        assert!(counter.get("GetItem") >= 3, "it did not look: {sent:?}");
        holder.commit().await.unwrap();
    };
    tokio::join!(first, second, watch);
    assert_eq!(
        env.raw_get(&table, &key("k")).await.unwrap(),
        item(&[("Id", s("k")), ("v", n(112))]),
        "the three writes in order, and neither lock, mark nor line"
    );
}

/// Requests of the waiter at which it dies, one run each.
const CRASH_POINTS: u64 = 10;

/// A waiter behind an older waiter's live mark dies at each of its first requests (its ticket,
/// its record's creation with its lock attempt, its entry in the line, its looks), before the
/// request or after it landed with its answer lost: the holder commits, a newcomer takes the
/// item once the mark and the dead waiter's entry have expired, the item ends with both
/// increments and neither lock, mark nor line, and a sweep settles the waiter's record.
/// `far_back`: another live entry is in the line ahead of the waiter, which has
/// `line_looks_read` (its looks are reads).
async fn a_waiter_in_the_line_dying_at_every_request(
    mode: FaultMode,
    prefix: &str,
    far_back: bool,
) {
    let env = TestEnv::new(prefix).await;
    let table = env.table.clone();
    let DyingCast {
        holders,
        waiters,
        faults,
        newcomers,
    } = if far_back {
        DyingCast::with_waiters(&env, |s| s.line_looks_read = true)
    } else {
        DyingCast::new(&env)
    };
    let mut joined = 0;
    for k in 1..=CRASH_POINTS {
        let label = format!("{mode:?} at request {k}");
        env.raw_put(&table, item(&[("Id", s("k")), ("v", n(1))]))
            .await;
        let h = holders.begin();
        let v = read_v(&h, &table, "k").await;
        set_i(&h, &table, "k", v + 1).await;
        // An older waiter's mark, live while the dying waiter runs.
        stage_mark(&env, "k", 1_500).await;
        if far_back {
            // And another older waiter in the line, ahead of the dying one.
            stage_line_entry(&env, "k", 1_500).await;
        }

        faults.crash_at(k, mode);
        let (wid, waiter) = start_dying_waiter(&waiters, &table, &faults, &label).await;
        h.commit()
            .await
            .unwrap_or_else(|e| panic!("{label}: holder: {e}"));
        dead_waiter_returned(waiter, &label).await;
        faults.disarm();
        if line_on(&env, "k").await.is_some_and(|l| !l.is_empty()) {
            joined += 1;
        }
        // The staged mark and the dead waiter's entry expire.
        tokio::time::sleep(Duration::from_millis(1_600)).await;

        newcomer_increments(&env, &newcomers, &label).await;
        sweep_settles(&env, &wid, &label).await;
    }
    println!("{mode:?}: {joined} runs of {CRASH_POINTS} left the dead waiter's entry");
    assert!(joined > 0, "{mode:?}: no run left the dead waiter's entry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_in_the_line_dying_before_any_of_its_requests_leaves_nothing_in_the_way() {
    a_waiter_in_the_line_dying_at_every_request(
        FaultMode::BeforeSend,
        "ct-line-dead-before",
        false,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_far_back_in_the_line_dying_before_any_of_its_requests_leaves_nothing_in_the_way()
{
    a_waiter_in_the_line_dying_at_every_request(FaultMode::BeforeSend, "ct-line-far-before", true)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_far_back_in_the_line_dying_after_any_of_its_requests_leaves_nothing_in_the_way() {
    a_waiter_in_the_line_dying_at_every_request(FaultMode::AfterSend, "ct-line-far-after", true)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_in_the_line_dying_after_any_of_its_requests_landed_leaves_nothing_in_the_way() {
    a_waiter_in_the_line_dying_at_every_request(FaultMode::AfterSend, "ct-line-dead-after", false)
        .await;
}

/// A sweep of the table takes the stale entries out of a line no lock reads again (expired, or
/// written `rollback_after` ago), conditional on the line as read, and the whole line once none
/// is left; a live entry stays. A dry run counts them and writes nothing.
#[tokio::test]
async fn a_sweep_takes_stale_entries_out_of_the_line() {
    let env = TestEnv::new("ct-line-sweep").await;
    let table = env.table.clone();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let line = |entries: &[(u64, i64)]| {
        aws_sdk_dynamodb::types::AttributeValue::M(
            entries
                .iter()
                .map(|(t, e)| (t.to_string(), n(now + e)))
                .collect(),
        )
    };
    let with_line = |k: &str, entries: &[(u64, i64)]| {
        let mut i = item(&[("Id", s(k)), ("v", n(1))]);
        i.insert("_TxHL".into(), line(entries));
        i
    };
    env.raw_put(&table, with_line("dead", &[(3, -1_000), (4, -5)]))
        .await;
    env.raw_put(&table, with_line("mixed", &[(3, -1_000), (9, 60_000)]))
        .await;
    env.raw_put(&table, with_line("empty", &[])).await;
    let opts = |dry_run| {
        SweepOptions::new()
            .tables_to_scan([table.clone()])
            .dry_run(dry_run)
    };
    let dry = env.manager.sweep(&opts(true)).await.unwrap();
    assert!(dry.errors.is_empty(), "{dry:?}");
    assert_eq!(dry.marks_removed, 3, "{dry:?}");
    assert!(line_on(&env, "dead").await.is_some(), "a dry run wrote");

    let report = env.manager.sweep(&opts(false)).await.unwrap();
    assert!(report.errors.is_empty(), "{report:?}");
    assert_eq!(report.marks_removed, 3, "{report:?}");
    for k in ["dead", "empty"] {
        assert_eq!(
            env.raw_get(&table, &key(k)).await.unwrap(),
            item(&[("Id", s(k)), ("v", n(1))]),
            "{k}: the line stayed"
        );
    }
    assert_eq!(
        line_on(&env, "mixed")
            .await
            .map(|l| l.keys().copied().collect::<Vec<_>>()),
        Some(vec![9]),
        "the live entry stays, the expired one goes"
    );
}
