//! `run`'s retries: a new attempt locks what the failed one read, in key order, before the
//! closure runs again (`Settings::run_relocks_reads`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use dynamodb_transactions::{Item, TicketSource, TxId, TxState};
use tokio::sync::Mutex;

use crate::common::*;
use crate::{lock, ordered_with, ticket_of};

/// Who holds each of `keys` right now (the raw `_TxId`, `None` when unlocked).
async fn holders(env: &TestEnv, keys: &[&str]) -> Vec<Option<String>> {
    let mut out = Vec::new();
    for k in keys {
        let raw = env.raw_get(&env.table, &key(k)).await.unwrap();
        out.push(raw.get("_TxId").map(|v| v.as_s().unwrap().clone()));
    }
    out
}

fn number(item: Option<&Item>) -> i64 {
    item.and_then(|i| i.get("v"))
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// Locked reads of `keys` in `tx`, in that order: their `v`.
pub(super) async fn read_values(
    tx: &dynamodb_transactions::Transaction,
    table: &str,
    keys: [&str; 2],
) -> Result<Vec<i64>, dynamodb_transactions::Error> {
    let mut v = Vec::new();
    for k in keys {
        let out = tx
            .get_item()
            .table_name(table)
            .key("Id", s(k))
            .send()
            .await?;
        v.push(number(out.item()));
    }
    Ok(v)
}

/// Sets `v` of each item in `tx`.
pub(super) async fn write_values(
    tx: &dynamodb_transactions::Transaction,
    table: &str,
    values: [(&str, i64); 2],
) -> Result<(), dynamodb_transactions::Error> {
    for (k, val) in values {
        tx.update_item()
            .table_name(table)
            .key("Id", s(k))
            .update_expression("SET v = :v")
            .expression_attribute_values(":v", n(val))
            .send()
            .await?;
    }
    Ok(())
}

/// Runs a unit of work that reads `b`, then `a`, then moves 1 from `b` to `a`; its first attempt
/// is rolled back from outside after both reads. Returns, per attempt, the transaction's id and
/// who held `a` and `b` when its closure started.
async fn retried_transfer(relock: bool) -> (TestEnv, Vec<(TxId, Vec<Option<String>>)>) {
    let env = TestEnv::new("ct-relock").await;
    for k in ["a", "b"] {
        env.raw_put(&env.table, item(&[("Id", s(k)), ("v", n(10))]))
            .await;
    }
    let m = ordered_with(&env, TicketSource::Counter, Duration::from_secs(30), |s| {
        s.run_relocks_reads = relock;
        s.backoff_base = Duration::from_millis(1);
    });
    let other = env.manager.clone();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let attempts = AtomicU32::new(0);
    let (seen2, table) = (seen.clone(), env.table.clone());
    let env_ref = &env;
    m.run(async |tx| {
        let attempt = attempts.fetch_add(1, Ordering::SeqCst) + 1;
        seen2
            .lock()
            .await
            .push((tx.id().clone(), holders(env_ref, &["a", "b"]).await));
        let v = read_values(tx, &table, ["b", "a"]).await?;
        if attempt == 1 {
            // A competitor rolls this attempt back after both reads.
            other.rollback_transaction(tx.id()).await.unwrap();
        }
        write_values(tx, &table, [("b", v[0] - 1), ("a", v[1] + 1)]).await?;
        Ok(())
    })
    .await
    .unwrap();
    let seen = seen.lock().await.clone();
    (env, seen)
}

#[tokio::test]
async fn a_retry_locks_what_the_failed_attempt_read_before_its_closure_runs() {
    let (env, seen) = retried_transfer(true).await;
    assert_eq!(seen.len(), 2, "one retry: {seen:?}");
    let (first, at_first) = &seen[0];
    assert_eq!(
        at_first,
        &vec![None, None],
        "nothing locked before the first attempt"
    );
    let (second, at_second) = &seen[1];
    let mine = Some(second.as_str().to_string());
    assert_eq!(
        at_second,
        &vec![mine.clone(), mine],
        "the retry holds both items it read before its closure runs"
    );
    assert_eq!(
        env.tx_state(first).await.map(|s| s.0),
        Some(TxState::RolledBack)
    );
    assert_eq!(
        env.tx_state(second).await.map(|s| s.0),
        Some(TxState::Committed)
    );
    // The closure's reads of the relocked items returned them as they are: the transfer is exact,
    // and nothing stays locked.
    for (k, v) in [("a", 11), ("b", 9)] {
        assert_eq!(
            env.raw_get(&env.table, &key(k)).await.unwrap(),
            item(&[("Id", s(k)), ("v", n(v))])
        );
    }
}

#[tokio::test]
async fn without_the_setting_a_retry_starts_with_nothing_locked() {
    let (env, seen) = retried_transfer(false).await;
    assert_eq!(seen.len(), 2, "one retry: {seen:?}");
    assert_eq!(seen[1].1, vec![None, None]);
    for (k, v) in [("a", 11), ("b", 9)] {
        assert_eq!(
            env.raw_get(&env.table, &key(k)).await.unwrap(),
            item(&[("Id", s(k)), ("v", n(v))])
        );
    }
}

/// Units of work reading two items in opposite orders, concurrently: every one commits, and the
/// transfers are exact.
#[tokio::test]
async fn opposite_read_orders_all_commit_with_relocked_retries() {
    let env = TestEnv::new("ct-relock-orders").await;
    for k in ["a", "b"] {
        env.raw_put(&env.table, item(&[("Id", s(k)), ("v", n(100))]))
            .await;
    }
    let m = ordered_with(&env, TicketSource::Counter, Duration::from_secs(30), |s| {
        s.lock_wait = Duration::from_secs(10);
    });
    let mut tasks = Vec::new();
    for w in 0..6 {
        let (m, table) = (m.clone(), env.table.clone());
        tasks.push(async move {
            let (from, to) = if w % 2 == 0 { ("a", "b") } else { ("b", "a") };
            m.run(async |tx| {
                let v = read_values(tx, &table, [from, to]).await?;
                write_values(tx, &table, [(from, v[0] - 1), (to, v[1] + 1)]).await?;
                Ok(())
            })
            .await
        });
    }
    for r in futures::future::join_all(tasks).await {
        r.unwrap();
    }
    let mut total = 0;
    for k in ["a", "b"] {
        total += number(env.raw_get(&env.table, &key(k)).await.as_ref());
    }
    assert_eq!(total, 200);
    assert_eq!(holders(&env, &["a", "b"]).await, vec![None, None]);
}

/// A retry outranks every first attempt: a first attempt holding an item the retry relocks is
/// rolled back (after the grace), even with a ticket older than the unit of work's.
#[tokio::test]
async fn a_retry_outranks_a_first_attempt_with_an_older_ticket() {
    let env = TestEnv::new("ct-outrank").await;
    for k in ["g", "x"] {
        env.raw_put(&env.table, item(&[("Id", s(k)), ("v", n(10))]))
            .await;
    }
    let m = ordered_with(&env, TicketSource::Counter, Duration::from_secs(30), |s| {
        // One retry: a retry that waited for the older first attempt would give up.
        s.run_attempts = 2;
        s.backoff_base = Duration::from_millis(1);
    });
    // A first attempt whose ticket is older than the unit of work's (tickets taken at begin).
    let older = m.begin();
    lock(&older, &env.table, "g").await.unwrap();
    let ids = Arc::new(Mutex::new(Vec::new()));
    let (ids2, table, other) = (ids.clone(), env.table.clone(), env.manager.clone());
    let older_ref = &older;
    let r = m
        .run(async |tx| {
            let attempt = {
                let mut ids = ids2.lock().await;
                ids.push(tx.id().clone());
                ids.len()
            };
            let out = tx
                .get_item()
                .table_name(&table)
                .key("Id", s("x"))
                .send()
                .await?;
            let v = number(out.item());
            if attempt == 1 {
                // This attempt is rolled back, and the older first attempt takes `x`.
                other.rollback_transaction(tx.id()).await.unwrap();
                lock(older_ref, &table, "x").await.unwrap();
            }
            tx.update_item()
                .table_name(&table)
                .key("Id", s("x"))
                .update_expression("SET v = :v")
                .expression_attribute_values(":v", n(v + 1))
                .send()
                .await?;
            Ok(())
        })
        .await;
    let ids = ids.lock().await.clone();
    r.unwrap_or_else(|e| panic!("the retry waited for a first attempt: {e:?}"));
    assert_eq!(ids.len(), 2, "committed at its second attempt");
    let (first, retry) = (&ids[0], &ids[1]);
    // The order the records say: the retry before the older first attempt, before the unit of
    // work's own first attempt.
    let (t_first, t_retry, t_older) = (
        ticket_of(&env, first).await,
        ticket_of(&env, retry).await,
        ticket_of(&env, older.id()).await,
    );
    assert!(
        t_retry < t_older && t_older < t_first,
        "{t_retry} {t_older} {t_first}"
    );
    assert_eq!(
        env.tx_state(retry).await.map(|s| s.0),
        Some(TxState::Committed)
    );
    assert_eq!(
        env.tx_state(older.id()).await.map(|s| s.0),
        Some(TxState::RolledBack),
        "the first attempt holding the retry's item was rolled back"
    );
    let err = older.commit().await.unwrap_err();
    assert!(
        matches!(err, dynamodb_transactions::Error::RolledBack { .. }),
        "{err:?}"
    );
    // The retry read `x` as the first attempt left it (untouched), and nothing stays locked.
    assert_eq!(
        env.raw_get(&env.table, &key("x")).await.unwrap(),
        item(&[("Id", s("x")), ("v", n(11))])
    );
    assert_eq!(
        env.raw_get(&env.table, &key("g")).await.unwrap(),
        item(&[("Id", s("g")), ("v", n(10))])
    );
}

/// A first attempt that holds an item and meets a retry's lock gives its attempt up at once
/// (`Error::ItemLocked`, naming the retry) instead of waiting with the item held: a retry never
/// waits for a first attempt that waits for another retry. Here the retry holds `r` in its
/// closure until the first attempt's read has returned; a first attempt that waited would wait
/// for ever. The first attempt, rolled back, leaves `f` as it was, and the retry commits.
#[tokio::test]
async fn a_first_attempt_holding_an_item_yields_to_a_retry() {
    let env = TestEnv::new("ct-yield").await;
    for k in ["f", "r"] {
        env.raw_put(&env.table, item(&[("Id", s(k)), ("v", n(10))]))
            .await;
    }
    let m = ordered_with(&env, TicketSource::Counter, Duration::from_secs(30), |s| {
        s.backoff_base = Duration::from_millis(1);
        // A wait would outlast the test's patience.
        s.lock_wait = Duration::from_secs(60);
    });
    let (holding, go) = (tokio::sync::Notify::new(), tokio::sync::Notify::new());
    let attempts = AtomicU32::new(0);
    let (table, other) = (env.table.clone(), env.manager.clone());
    let unit = m.run(async |tx| {
        let attempt = attempts.fetch_add(1, Ordering::SeqCst) + 1;
        let out = tx
            .get_item()
            .table_name(&table)
            .key("Id", s("r"))
            .send()
            .await?;
        let v = number(out.item());
        if attempt == 1 {
            // Rolled back by a competitor: the next attempt is a retry.
            other.rollback_transaction(tx.id()).await.unwrap();
        } else {
            holding.notify_one();
            go.notified().await;
        }
        tx.update_item()
            .table_name(&table)
            .key("Id", s("r"))
            .update_expression("SET v = :v")
            .expression_attribute_values(":v", n(v + 1))
            .send()
            .await?;
        Ok(tx.id().clone())
    });
    let driver = async {
        holding.notified().await;
        let retry = env.raw_get(&env.table, &key("r")).await.unwrap()["_TxId"]
            .as_s()
            .unwrap()
            .clone();

        let first = m.begin();
        lock(&first, &env.table, "f").await.unwrap();
        let read = tokio::time::timeout(
            Duration::from_secs(10),
            first
                .get_item()
                .table_name(&env.table)
                .key("Id", s("r"))
                .send(),
        )
        .await
        .expect("the first attempt waited for the retry holding an item");
        match read {
            Err(dynamodb_transactions::Error::ItemLocked { owner, .. }) => {
                assert_eq!(owner.as_str(), retry, "the retry is named")
            }
            other => panic!("expected ItemLocked: {other:?}"),
        }
        // Nothing decided it: it still holds `f` until it rolls back.
        let raw_f = env.raw_get(&env.table, &key("f")).await.unwrap();
        assert_eq!(raw_f["_TxId"], s(first.id().as_str()), "{raw_f:?}");
        assert_eq!(
            env.tx_state(first.id()).await.map(|s| s.0),
            Some(TxState::Pending)
        );
        first.rollback().await.unwrap();

        go.notify_one();
        retry
    };
    let (committed, retry) = tokio::join!(unit, driver);
    let committed = committed.unwrap();
    assert_eq!(committed.as_str(), retry);
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
    assert_eq!(
        env.raw_get(&env.table, &key("r")).await.unwrap(),
        item(&[("Id", s("r")), ("v", n(11))])
    );
    assert_eq!(
        env.raw_get(&env.table, &key("f")).await.unwrap(),
        item(&[("Id", s("f")), ("v", n(10))])
    );
}

/// A retry rolled back while it relocks runs no closure on that attempt: it learns the decision
/// before `work` runs again, and the next attempt relocks. Here the retry relocks `a`, then waits
/// at `b` for a younger first attempt (within a long grace); just before the look that takes `b`,
/// another coordinator rolls the retry back and releases `b`. The closure runs twice in all (on
/// the old code three times: the rolled-back retry ran it, and learnt the decision at its commit),
/// the transfer is exact, and nothing stays locked, the late lock on `b` included.
#[tokio::test]
async fn a_retry_rolled_back_while_it_relocks_runs_no_closure_on_that_attempt() {
    let env = TestEnv::new("ct-relock-wound").await;
    for k in ["a", "b"] {
        env.raw_put(&env.table, item(&[("Id", s(k)), ("v", n(10))]))
            .await;
    }
    // Filled in before the hook is armed: the retry and the first attempt holding `b`.
    let victims: Arc<std::sync::Mutex<Option<(TxId, TxId)>>> = Arc::default();
    let victims2 = victims.clone();
    let (txt, imgt) = (
        env.manager.transactions_table().to_string(),
        env.manager.images_table().to_string(),
    );
    let hook = RunBefore::unarmed("UpdateItem", move || {
        let (retry, blocker) = victims2
            .lock()
            .unwrap()
            .clone()
            .expect("armed with victims");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let other = dynamodb_transactions::TransactionManager::builder(client())
            .transactions_table(&txt)
            .images_table(&imgt)
            .build();
        rt.block_on(async {
            other.rollback_transaction(&retry).await.unwrap();
            other.rollback_transaction(&blocker).await.unwrap();
        });
    });
    let m = crate::ordered_on(&env, client_with(vec![shared(hook.clone())]), |s| {
        // The retry waits at `b` for the younger first attempt instead of rolling it back.
        s.wound_grace = Duration::from_secs(60);
        s.lock_wait = Duration::from_secs(60);
        s.backoff_base = Duration::from_millis(1);
    });
    let attempts = AtomicU32::new(0);
    let first_id: Arc<std::sync::Mutex<Option<TxId>>> = Arc::default();
    let blocker_id: Arc<std::sync::Mutex<Option<TxId>>> = Arc::default();
    let (table, other) = (env.table.clone(), env.manager.clone());
    let unit = m.run(async |tx| {
        let attempt = attempts.fetch_add(1, Ordering::SeqCst) + 1;
        let v = read_values(tx, &table, ["a", "b"]).await?;
        if attempt == 1 {
            // Rolled back by a competitor; a younger first attempt then takes `b`.
            *first_id.lock().unwrap() = Some(tx.id().clone());
            other.rollback_transaction(tx.id()).await.unwrap();
            let blocker = other.begin();
            lock(&blocker, &table, "b").await.unwrap();
            *blocker_id.lock().unwrap() = Some(blocker.id().clone());
        }
        write_values(tx, &table, [("a", v[0] + 1), ("b", v[1] - 1)]).await?;
        Ok(())
    });
    let driver = async {
        // The retry holds `a` (relocked) and waits at `b`.
        let retry = loop {
            let first = first_id.lock().unwrap().clone();
            let holders = holders(&env, &["a", "b"]).await;
            if let (Some(first), Some(holder_a)) = (first, holders[0].clone())
                && holder_a != first.as_str()
                && blocker_id.lock().unwrap().is_some()
            {
                break TxId::from(holder_a);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let blocker = blocker_id.lock().unwrap().clone().unwrap();
        *victims.lock().unwrap() = Some((retry.clone(), blocker));
        // Its next look at `b`: a lock attempt on the items' table, naming it and `b`.
        hook.arm(&[
            retry.as_str(),
            &format!("\"TableName\":\"{}\"", env.table),
            "{\"S\":\"b\"}",
        ]);
        retry
    };
    let (ran, retry) = tokio::join!(unit, driver);
    ran.unwrap();
    assert!(hook.ran(), "the hook rolled the retry back");
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        2,
        "the closure ran on the rolled-back retry"
    );
    assert_eq!(
        env.tx_state(&retry).await.map(|s| s.0),
        Some(TxState::RolledBack)
    );
    for (k, v) in [("a", 11), ("b", 9)] {
        assert_eq!(
            env.raw_get(&env.table, &key(k)).await.unwrap(),
            item(&[("Id", s(k)), ("v", n(v))])
        );
    }
}
