//! `run`'s first attempt behind a retry (`Settings::first_attempt_patience`): a retry outranks
//! every first attempt, so a first attempt that holds nothing and waits behind retries drawn after
//! it gives its attempt up once past its patience, and its retry goes ahead of theirs.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use dynamodb_transactions::{ContentionPolicy, TransactionManager, TxId, TxState};
use tokio::sync::{Mutex, Notify};

use crate::common::*;
use crate::{ordered_on, run_before_with, ticket_of};

/// `v` of the item `out` read.
fn value(out: &dynamodb_transactions::GetOutput) -> i64 {
    out.item().unwrap()["v"].as_n().unwrap().parse().unwrap()
}

/// The holder: a unit of work whose first attempt reads `k` and is rolled back by a competitor,
/// and whose retry (keeping the unit's ticket, drawn after the waiter's) relocks `k`, says so on
/// `holding`, and commits `v + 1` once `go` is notified. Runs on a thread of its own (the hook
/// that starts it must return while the retry holds the item). Returns the ids of its attempts.
fn holder_unit(
    m: TransactionManager,
    table: String,
    holding: Arc<Notify>,
    go: Arc<Notify>,
) -> std::thread::JoinHandle<Vec<TxId>> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let ids = Mutex::new(Vec::new());
            m.run(async |tx| {
                let attempt = {
                    let mut ids = ids.lock().await;
                    ids.push(tx.id().clone());
                    ids.len()
                };
                let get = tx.get_item().table_name(&table).key("Id", s("k"));
                let v = value(&get.send().await?);
                if attempt == 1 {
                    // Rolled back by a competitor: the next attempt is a retry.
                    m.rollback_transaction(tx.id()).await.unwrap();
                } else {
                    holding.notify_one();
                    go.notified().await;
                }
                tx.update_item()
                    .table_name(&table)
                    .key("Id", s("k"))
                    .update_expression("SET v = :v")
                    .expression_attribute_values(":v", n(v + 1))
                    .send()
                    .await?;
                Ok(())
            })
            .await
            .unwrap();
            ids.into_inner()
        })
    })
}

/// A first attempt (holding nothing) that meets a retry drawn after it on the item it reads gives
/// its attempt up once past its patience, and its retry, which outranks the holder's, takes the
/// item next. Staged: the waiter takes its ticket with its record; just before its first lock
/// attempt goes out, the holder's unit starts (drawing a later ticket), is rolled back once, and
/// its retry relocks the item and keeps it. The waiter's closure runs a second time while the
/// retry still holds the item: its retry relocks the item first, and gives the younger retry its
/// grace. On the code before, its first attempt waited there until the retry committed, and the
/// test timed out waiting for that attempt to be rolled back.
#[tokio::test]
async fn a_first_attempt_behind_a_retry_drawn_after_it_retries_once_past_its_patience() {
    let env = TestEnv::new("ct-patience").await;
    env.raw_put(&env.table, item(&[("Id", s("k")), ("v", n(1))]))
        .await;
    let (holding, go) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let holder_thread = Arc::new(std::sync::Mutex::new(None));
    let (table, h_holding, h_go, h_thread) = (
        env.table.clone(),
        holding.clone(),
        go.clone(),
        holder_thread.clone(),
    );
    let (hook, _) = run_before_with(
        &env,
        "UpdateItem",
        &format!("\"TableName\":\"{}\"", env.table),
        |s| {
            s.contention = ContentionPolicy::Ordered {
                dead_after: Duration::from_secs(30),
                ticket_at_begin: true,
            };
            s.backoff_base = Duration::from_millis(1);
        },
        async move |m: TransactionManager| {
            *h_thread.lock().unwrap() = Some(holder_unit(m, table, h_holding.clone(), h_go));
            // The hook returns (and the waiter's lock attempt goes out) once the retry holds `k`.
            h_holding.notified().await;
        },
    );
    let w = ordered_on(&env, client_with(vec![shared(hook.clone())]), |s| {
        s.first_attempt_patience = Duration::from_millis(300);
        s.backoff_base = Duration::from_millis(1);
        // The waiter's retry gives the younger retry holding `k` its grace until it commits.
        s.wound_grace = Duration::from_secs(60);
        s.lock_wait = Duration::from_secs(60);
    });
    let ids: Mutex<Vec<TxId>> = Mutex::new(Vec::new());
    let runs = AtomicU32::new(0);
    let waiter = w.run(async |tx| {
        ids.lock().await.push(tx.id().clone());
        runs.fetch_add(1, Ordering::SeqCst);
        let get = tx.get_item().table_name(&env.table).key("Id", s("k"));
        let v = value(&get.send().await?);
        tx.update_item()
            .table_name(&env.table)
            .key("Id", s("k"))
            .update_expression("SET v = :v")
            .expression_attribute_values(":v", n(v + 1))
            .send()
            .await?;
        Ok(v)
    });
    let driver = async {
        // The waiter's first attempt is given up while the holder's retry still holds `k`.
        tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                let first = ids.lock().await.first().cloned();
                if let Some(first) = first
                    && env.tx_state(&first).await.map(|s| s.0) == Some(TxState::RolledBack)
                {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the first attempt kept waiting behind the retry");
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "its retry waits at `k` first"
        );
        let raw = env.raw_get(&env.table, &key("k")).await.unwrap();
        assert_eq!(raw["v"], n(1), "{raw:?}");
        let holder_lock = raw["_TxId"].as_s().unwrap().clone();
        go.notify_one();
        holder_lock
    };
    let (read, holder_lock) = tokio::join!(waiter, driver);
    let read = read.unwrap();
    assert!(
        hook.ran(),
        "the holder ran before the waiter's first lock attempt"
    );
    let holder_ids = holder_thread
        .lock()
        .unwrap()
        .take()
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(holder_ids.len(), 2, "the holder committed at its retry");
    assert_eq!(holder_lock, holder_ids[1].as_str(), "its retry held `k`");
    // The waiter read the holder's write, and wrote its own over it.
    assert_eq!(read, 2);
    assert_eq!(
        env.raw_get(&env.table, &key("k")).await.unwrap(),
        item(&[("Id", s("k")), ("v", n(3))])
    );
    let ids = ids.lock().await.clone();
    assert_eq!(ids.len(), 2, "the waiter committed at its second attempt");
    assert_eq!(
        env.tx_state(&ids[0]).await.map(|s| s.0),
        Some(TxState::RolledBack),
        "the first attempt was given up"
    );
    assert_eq!(
        env.tx_state(&ids[1]).await.map(|s| s.0),
        Some(TxState::Committed)
    );
    assert_eq!(
        env.tx_state(&holder_ids[1]).await.map(|s| s.0),
        Some(TxState::Committed)
    );
    // The tickets the records hold: the waiter's first attempt drew before the holder's unit,
    // whose retry outranked it; the waiter's retry outranks the holder's.
    let (w_first, w_retry, h_retry) = (
        ticket_of(&env, &ids[0]).await,
        ticket_of(&env, &ids[1]).await,
        ticket_of(&env, &holder_ids[1]).await,
    );
    assert!(
        w_retry < h_retry && h_retry < w_first,
        "{w_retry} {h_retry} {w_first}"
    );
}
