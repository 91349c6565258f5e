//! Waiting in process: a waiter whose item a transaction of its own manager holds waits for that
//! transaction here (its commit tells it the handover, or lets the item go), not by looks at
//! DynamoDB (docs/PROTOCOL.md "Handing the item over", *Waiting in process*).

use std::time::Duration;

use dynamodb_transactions::fault::RequestCounter;

use crate::common::*;
use crate::handover::{Call, handing, incrementing_waiter, names, raw, until, waiter_reads};
use crate::oldest_mark::{read_v, set_i};

/// A waiter of `m` that reads `k` (locked), writes what it read + 1 and commits, spawned; once
/// it marked `k` as its oldest waiter. What it read.
async fn marked_waiter(env: &TestEnv, m: &dynamodb_transactions::TransactionManager) -> Call<i64> {
    let (wid, waiter) = incrementing_waiter(env, m);
    until(env, "k", "the waiter marks the item", |i| {
        names(i, "_TxH") == [wid.to_string()]
    })
    .await;
    waiter
}

/// The marked waiter behind a holder of its own manager sends nothing while the holder holds
/// (it looked at once, again and again, before: the item is its next), and the holder's commit
/// hands it the item: it read 2, and the item ends at 3, free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_behind_a_holder_of_its_own_manager_sends_nothing_while_it_holds() {
    let env = TestEnv::new("ct-inproc-quiet").await;
    let counter = RequestCounter::new();
    let m = handing(&env, client_with(vec![shared(counter.clone())]), |_| {});
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    let holder = m.begin();
    assert_eq!(read_v(&holder, &env.table, "k").await, 1);
    set_i(&holder, &env.table, "k", 2).await;
    let waiter = marked_waiter(&env, &m).await;
    // The mark's write has answered by now; the holder sends nothing meanwhile.
    tokio::time::sleep(Duration::from_millis(50)).await;
    counter.reset();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(counter.total(), 0, "{:?}", counter.snapshot());
    holder.commit().await.unwrap();
    assert_eq!(waiter.await.unwrap(), 2);
    assert_eq!(raw(&env, "k").await, item(&[("Id", s("k")), ("v", n(3))]));
}

/// How the holder of the item ends in [`a_waiter_in_process_looks_again_once_its_holder_ends`].
enum Ends {
    /// It holds two items, so it has a record, and commits: it unlocks, it hands nothing over.
    CommitsWithRecord,
    /// Its handle is dropped (its lock, without record, released in the background).
    Dropped,
}

/// A waiter in process behind a holder of its own manager sends nothing while it holds the
/// item, whichever way the holder locked it (a holder with a record locks its second item with
/// the record's creation), and, when the holder ends without handing it the item, looks again
/// well before its bound (10 s here) for looking again: it takes the item and commits on what
/// the holder left.
async fn a_waiter_in_process_looks_again_once_its_holder_ends(prefix: &str, ends: Ends) {
    let env = TestEnv::new(prefix).await;
    let counter = RequestCounter::new();
    let m = handing(&env, client_with(vec![shared(counter.clone())]), |s| {
        s.queue_ttl = Duration::from_secs(30);
        s.rollback_on_drop = true;
    });
    for k in ["j", "k"] {
        env.raw_put(&env.table, item(&[("Id", s(k)), ("v", n(1))]))
            .await;
    }
    let holder = m.begin();
    if matches!(ends, Ends::CommitsWithRecord) {
        assert_eq!(read_v(&holder, &env.table, "j").await, 1);
    }
    assert_eq!(read_v(&holder, &env.table, "k").await, 1);
    set_i(&holder, &env.table, "k", 2).await;
    let waiter = marked_waiter(&env, &m).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    counter.reset();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(counter.total(), 0, "{:?}", counter.snapshot());
    let (read, left) = match ends {
        Ends::CommitsWithRecord => {
            holder.commit().await.unwrap();
            (2, 3)
        }
        Ends::Dropped => {
            drop(holder);
            (1, 2)
        }
    };
    let took = tokio::time::timeout(Duration::from_secs(5), waiter).await;
    assert_eq!(
        took.expect("the waiter waited out its bound").unwrap(),
        read
    );
    assert_eq!(
        raw(&env, "k").await,
        item(&[("Id", s("k")), ("v", n(left))])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_in_process_looks_again_once_its_holder_commits_with_a_record() {
    a_waiter_in_process_looks_again_once_its_holder_ends(
        "ct-inproc-commit",
        Ends::CommitsWithRecord,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_in_process_looks_again_once_its_holder_is_dropped() {
    a_waiter_in_process_looks_again_once_its_holder_ends("ct-inproc-drop", Ends::Dropped).await;
}

/// A waiter in process whose view of the line is stale keeps the line that formed meanwhile,
/// without a read: the marked waiter of one manager waits in process behind a holder of its own
/// manager (with a record: it lets the item go, it hands nothing over) while a waiter of another
/// manager joins the line. Let go, the marked waiter's lock is held to the line as it last saw
/// it (none), is refused by the line that formed, and takes the item from the line as the
/// refusal returned it: the other waiter is the mark from that write on. The marked waiter sends
/// no `GetItem`, and the other takes the item next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_woken_in_process_keeps_the_line_that_formed_while_it_waited() {
    let env = TestEnv::new("ct-inproc-line").await;
    let counter = RequestCounter::new();
    let m = handing(&env, client_with(vec![shared(counter.clone())]), |s| {
        s.queue_ttl = Duration::from_secs(30);
    });
    let other = handing(&env, client(), |_| {});
    for k in ["j", "k"] {
        env.raw_put(&env.table, item(&[("Id", s(k)), ("v", n(1))]))
            .await;
    }
    let holder = m.begin();
    assert_eq!(read_v(&holder, &env.table, "j").await, 1);
    assert_eq!(read_v(&holder, &env.table, "k").await, 1);
    set_i(&holder, &env.table, "k", 2).await;
    let (wid, waiter) = waiter_reads(&env, &m, |w, _, read| async move { (w, read.unwrap()) });
    until(&env, "k", "the waiter marks the item", |i| {
        names(i, "_TxH") == [wid.to_string()]
    })
    .await;
    let (oid, later) = incrementing_waiter(&env, &other);
    until(&env, "k", "the other waiter joins the line", |i| {
        names(i, "_TxHL") == [oid.to_string()]
    })
    .await;
    counter.reset();
    holder.commit().await.unwrap();
    let (w, read) = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter waited out its bound")
        .unwrap();
    assert_eq!(read, 2);
    assert_eq!(
        counter.get("GetItem"),
        0,
        "the waiter read the item: {:?}",
        counter.snapshot()
    );
    let held = raw(&env, "k").await;
    assert_eq!(
        names(&held, "_TxH"),
        [oid.to_string()],
        "the lock promoted the other waiter: {held:?}"
    );
    assert!(names(&held, "_TxHL").is_empty(), "{held:?}");
    set_i(&w, &env.table, "k", 3).await;
    w.commit().await.unwrap();
    assert_eq!(later.await.unwrap(), 3, "the other waiter took it next");
    assert_eq!(raw(&env, "k").await, item(&[("Id", s("k")), ("v", n(4))]));
}
