//! Crash and lost-response injection at every DynamoDB request a transaction makes, followed by
//! recovery through a second coordinator. Whatever the step, the end state must be exactly the
//! committed or exactly the rolled-back one, with no lock attribute or image left behind.
#[path = "../common/mod.rs"]
mod common;
mod workload;

use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use common::*;
use dynamodb_transactions::fault::{FaultInjector, FaultMode, RequestCounter};
use dynamodb_transactions::{Error, LockedReads, TransactionManager, TxId, TxState};
use workload::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// The coordinator dies before the k-th request reaches DynamoDB.
    CrashBefore,
    /// The k-th request lands, its response is lost, and the coordinator dies.
    CrashAfter,
    /// Only the k-th request's response is lost; the coordinator carries on.
    LoseOne,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recovery {
    ResumeCommit,
    ResumeRollback,
    Competitor,
}

fn manager_with(
    env: &TestEnv,
    faults: &FaultInjector,
    counter: &RequestCounter,
    one_shot: bool,
    w: Workload,
) -> TransactionManager {
    let client = client_with(vec![shared(faults.clone()), shared(counter.clone())]);
    TransactionManager::builder(client)
        .transactions_table(env.manager.transactions_table())
        .images_table(env.manager.images_table())
        .configure(|s| {
            s.rollback_on_drop = false;
            s.batch_locks = w.batch_locks();
            s.locked_reads = w.locked_reads();
            s.roll_forward = w.rolls_forward();
            s.judge_conditions = w != Workload::RolledForwardUnjudged;
            s.wait_in_ticket_order = w.queued();
            s.record_on_demand = w.on_demand();
            if w.queued() {
                s.contention = env.manager.settings().contention;
            }
            // The batched locks are the locking protocol's: keep writes off the fast path.
            s.write_only_fast_path &= !w.batch_locks();
            if !one_shot {
                s.one_shot_max_items = 0;
            }
        })
        .build()
}

/// Runs the workload once without faults and returns how many requests it made.
async fn count_requests(env: &TestEnv, w: Workload, one_shot: bool) -> u64 {
    let faults = FaultInjector::new();
    let counter = RequestCounter::new();
    let m = manager_with(env, &faults, &counter, one_shot, w);
    let ids = Ids {
        p: format!("count-{}", uuid::Uuid::new_v4().simple()),
    };
    setup(env, &ids).await;
    if w.extra() {
        setup_extra(env, &ids).await;
    }
    if w.queued() {
        setup_queues(env, &ids).await;
    }
    warm(&m, &env.table).await;
    counter.reset();
    let tx = m.begin();
    work(&tx, &env.table, &ids, w).await.unwrap();
    if w.queued() {
        register_waiters(env, &ids, tx.id(), w).await;
        let id = tx.id().clone();
        tx.commit().await.unwrap();
        let label = format!("{w:?} without faults");
        let view = queues_carried(&label, &ids, raw_view(env, &ids).await, registering(w));
        assert_eq!(view, committed_view(&ids, w));
        assert_eq!(env.tx_state(&id).await, Some((TxState::Committed, true)));
    } else if w == Workload::RolledBack {
        tx.rollback().await.unwrap();
        assert_eq!(raw_view(env, &ids).await, rolled_back_view(&ids));
    } else {
        let id = tx.id().clone();
        tx.commit().await.unwrap();
        assert_eq!(raw_view(env, &ids).await, committed_view(&ids, w));
        if w.extra() {
            assert_eq!(extra_view(env, &ids).await, (EXTRA_ITEMS, vec![]));
            let gates = env.record_rows(&id).await.len();
            assert!(gates > 8, "the record has its gate rows: {gates} rows");
        }
        if w.chunked() {
            // The header holds no request; chunk rows hold them all (later appends add rows).
            let rows = env.record_rows(&id).await;
            assert!(rows.len() >= 2, "{} rows", rows.len());
            let header = rows.iter().find(|r| r["_TxN"] == n(0)).unwrap();
            assert_eq!(header["_TxR"], AttributeValue::L(vec![]));
            assert_eq!(header["_TxC"], n(rows.len() - 1));
        }
    }
    println!("{w:?} one_shot={one_shot}: {:?}", counter.snapshot());
    counter.total()
}

/// Fetches the table's key schema so it does not count among the requests.
async fn warm(m: &TransactionManager, table: &str) {
    m.get_item()
        .table_name(table)
        .key("Id", s("warm-up"))
        .send()
        .await
        .unwrap();
}

async fn one_run(
    env: Arc<TestEnv>,
    w: Workload,
    one_shot: bool,
    fault: Fault,
    k: u64,
    rec: Recovery,
) {
    let label = format!("{w:?} one_shot={one_shot} {fault:?} at request {k}, recovery {rec:?}");
    let faults = FaultInjector::new();
    let counter = RequestCounter::new();
    let m = manager_with(&env, &faults, &counter, one_shot, w);
    let ids = Ids {
        p: format!("r{}", uuid::Uuid::new_v4().simple()),
    };
    setup(&env, &ids).await;
    if w.extra() {
        setup_extra(&env, &ids).await;
    }
    if w.queued() {
        setup_queues(&env, &ids).await;
    }
    warm(&m, &env.table).await;
    match fault {
        Fault::CrashBefore => faults.crash_at(k, FaultMode::BeforeSend),
        Fault::CrashAfter => faults.crash_at(k, FaultMode::AfterSend),
        Fault::LoseOne => faults.fail_once_at(k, FaultMode::AfterSend),
    }
    let tx = m.begin();
    let id: TxId = tx.id().clone();
    let mut registered = false;
    let outcome = match work(&tx, &env.table, &ids, w).await {
        Err(e) => {
            tx.abandon();
            Err(e)
        }
        Ok(()) if w.queued() => {
            register_waiters(&env, &ids, &id, w).await;
            registered = true;
            tx.commit().await
        }
        Ok(()) if w == Workload::RolledBack => tx.rollback().await,
        Ok(()) => tx.commit().await,
    };
    assert!(faults.struck(), "{label}: the fault never struck");
    faults.disarm();

    let recorded = recorded_letters(&env, &ids, &id).await;
    let committed = partial_view(&ids, w, &recorded);
    if outcome.is_err() {
        // Before anybody recovers: a reader at `Committed` sees the committed writes once the
        // record says committed (applied, or still to roll forward), and nothing of them before.
        let state = env.manager.transaction_state(&id).await.unwrap();
        let mut seen = Vec::new();
        for l in LETTERS {
            let got = env
                .manager
                .get_item()
                .table_name(&env.table)
                .key("Id", s(&ids.id(l)))
                .isolation(dynamodb_transactions::IsolationLevel::Committed)
                // Consistent: an eventually consistent read may show an item as it was up to a
                // second ago, before the commit (docs/ISOLATION.md); what is checked here is
                // which version is the committed one now.
                .consistent_read(true)
                .send()
                .await
                .unwrap_or_else(|e| panic!("{label}: committed read of {l}: {e}"));
            seen.push(got.item().cloned());
        }
        let now = env.manager.transaction_state(&id).await.unwrap();
        let committed_then = |s: &Option<dynamodb_transactions::TransactionStatus>| {
            s.as_ref().is_some_and(|s| s.state == TxState::Committed)
        };
        // (No recovery runs yet and the coordinator is dead: the state cannot move, except that
        // a lost-response run's live coordinator may still be finishing.)
        if fault != Fault::LoseOne && committed_then(&state) == committed_then(&now) {
            let expect = if committed_then(&state) {
                &committed
            } else {
                &rolled_back_view(&ids)
            };
            assert_eq!(&seen, expect, "{label}: committed reads after the crash");
        }
    }
    // A coordinator that reported success must be right about it.
    if outcome.is_ok() {
        let expect = if w == Workload::RolledBack {
            rolled_back_view(&ids)
        } else {
            committed_view(&ids, w)
        };
        let state = env
            .manager
            .transaction_state(&id)
            .await
            .unwrap()
            .map(|s| (s.state, s.finalized));
        if w != Workload::RolledBack {
            assert_eq!(
                state.map(|s| s.0),
                Some(TxState::Committed),
                "{label}: reported committed"
            );
        }
        // Items may still carry locks of a committed transaction whose cleanup failed; settle them.
        let (m2, _) = env.second_coordinator();
        if state.is_some() {
            m2.complete_transaction(&id).await.unwrap();
        }
        assert_eq!(
            strip_all(raw_view(&env, &ids).await),
            expect,
            "{label}: state after success"
        );
        if w.extra() {
            assert_eq!(
                extra_view(&env, &ids).await.0,
                EXTRA_ITEMS,
                "{label}: extra items after success"
            );
        }
    } else {
        let (m2, _) = env.second_coordinator();
        match rec {
            Recovery::ResumeCommit => match m2.resume(&id).await {
                Ok(t) => match t.commit().await {
                    Ok(()) | Err(Error::RolledBack { .. }) => {}
                    Err(e) => panic!("{label}: resume+commit failed: {e}"),
                },
                Err(Error::TransactionNotFound { .. }) => {}
                Err(e) => panic!("{label}: resume failed: {e}"),
            },
            Recovery::ResumeRollback => match m2.rollback_transaction(&id).await {
                Ok(())
                | Err(Error::AlreadyCommitted { .. })
                | Err(Error::TransactionNotFound { .. }) => {}
                Err(e) => panic!("{label}: resume+rollback failed: {e}"),
            },
            Recovery::Competitor => {
                // A competing transaction locks every item: it must see one consistent state.
                let t = m2.begin();
                let mut seen = Vec::new();
                for l in LETTERS {
                    let got = t
                        .get_item()
                        .table_name(&env.table)
                        .key("Id", s(&ids.id(l)))
                        .send()
                        .await;
                    seen.push(
                        got.unwrap_or_else(|e| panic!("{label}: competitor read failed: {e}"))
                            .item,
                    );
                }
                t.commit()
                    .await
                    .unwrap_or_else(|e| panic!("{label}: competitor commit failed: {e}"));
                assert!(
                    seen == committed || seen == rolled_back_view(&ids),
                    "{label}: competitor saw a mixed state: {seen:?}"
                );
                // A transaction whose locks the competitor never met (none left) is the sweeper's
                // job: roll back a pending one, finalize a decided one.
                match env
                    .manager
                    .transaction_state(&id)
                    .await
                    .unwrap()
                    .map(|s| (s.state, s.finalized))
                {
                    Some((TxState::Pending, _)) => m2.rollback_transaction(&id).await.unwrap(),
                    Some((_, false)) => {
                        m2.complete_transaction(&id).await.unwrap();
                    }
                    _ => {}
                }
            }
        }
    }

    if w.reads_first() && w.locked_reads() != LockedReads::RecordThenLock {
        // Read locks the record never named (with `LockThenRecord`, every read's after a crash;
        // with `RecordWithLock`, the read whose append was in flight; on demand, the first read's
        // before the record's creation) stay until a transaction
        // that needs the item meets them: here a reader in a transaction of its own, which changes
        // nothing.
        let (m3, _) = env.second_coordinator();
        for l in ["a", "b", "d"] {
            let t = m3.begin();
            t.get_item()
                .table_name(&env.table)
                .key("Id", s(&ids.id(l)))
                .send()
                .await
                .unwrap_or_else(|e| panic!("{label}: reader of {l}: {e}"));
            t.rollback().await.unwrap();
        }
    }
    // The end state: exactly one of the two, agreeing with the record, nothing left behind.
    let mut view = raw_view(&env, &ids).await;
    if w.queued() {
        let registered = if registered { registering(w) } else { &[] };
        view = queues_carried(&label, &ids, view, registered);
    }
    for it in view.iter().flatten() {
        assert!(!has_tx_attrs(it), "{label}: lock attributes left: {it:?}");
    }
    let state = env
        .manager
        .transaction_state(&id)
        .await
        .unwrap()
        .map(|s| (s.state, s.finalized));
    if w.extra() {
        let (updated, locked) = extra_view(&env, &ids).await;
        assert!(
            locked.is_empty(),
            "{label}: extra items left locked: {locked:?}"
        );
        let committed = matches!(state, Some((TxState::Committed, _)));
        let expect = if committed { EXTRA_ITEMS } else { 0 };
        assert_eq!(
            updated, expect,
            "{label}: extra items updated (committed: {committed})"
        );
    }
    match state {
        Some((TxState::Committed, fin)) => {
            assert!(fin, "{label}: committed record not finalized");
            assert_eq!(view, committed, "{label}: record committed, items not");
        }
        Some((TxState::RolledBack, fin)) => {
            assert!(fin, "{label}: rolled-back record not finalized");
            assert_eq!(
                view,
                rolled_back_view(&ids),
                "{label}: record rolled back, items not"
            );
        }
        Some((other, _)) => panic!("{label}: record left {other}"),
        None => assert_eq!(
            view,
            rolled_back_view(&ids),
            "{label}: no record, items changed"
        ),
    }
}

fn strip_all(v: View) -> View {
    v.into_iter()
        .map(|o| {
            o.map(|mut i| {
                i.retain(|k, _| !k.starts_with("_Tx"));
                i
            })
        })
        .collect()
}

async fn sweep_matrix(w: Workload, one_shot: bool) {
    let prefix = format!("crash-{}", if one_shot { "os" } else { "ph" });
    let env = Arc::new(
        TestEnv::with_settings(&prefix, |s| {
            if w.queued() {
                // The transaction meets the items' queues, so it takes a ticket and is older
                // than a competitor: judged dead (it crashed) after this, not after 10 s.
                s.wait_in_ticket_order = true;
                s.contention = dynamodb_transactions::ContentionPolicy::Ordered {
                    dead_after: std::time::Duration::from_secs(1),
                    ticket_at_begin: false,
                };
            }
        })
        .await,
    );
    let total = count_requests(&env, w, one_shot).await;
    let started = std::time::Instant::now();
    if matches!(w, Workload::BatchedWrites | Workload::BatchedChunked) && one_shot {
        // The record (with its chunk row) and every lock, cancelled because the put of b assumes
        // a create; the same with b locked as existing; the commit.
        assert_eq!(total, 3, "requests of the batched one-request commit");
    } else if matches!(
        w,
        Workload::ReadsThenWrites | Workload::RecordedReadsThenWrites
    ) && one_shot
    {
        // Three reads, each recorded and locked (together, or one then the other); the commit
        // records the writes itself.
        assert_eq!(
            total, 7,
            "requests of reads then a folded one-request commit"
        );
    } else if w == Workload::OnDemandReadsThenWrites && one_shot {
        // The table listed for the sweeper (the manager's first lock without record on it), the
        // first read's lock alone, the record's creation and the second read's lock, its append
        // and the third read's lock, the commit (which records the writes).
        assert_eq!(
            total, 7,
            "requests of reads on demand then a folded one-request commit"
        );
    } else if w == Workload::LockedReadsThenWrites && one_shot {
        // The record's creation with the first read's lock, two locks, the commit (which records
        // the writes).
        assert_eq!(
            total, 5,
            "requests of locked reads then a folded one-request commit"
        );
    } else if w == Workload::Batched && one_shot {
        // The read records every request, then locks its item; the other locks in one batch after
        // the record (their items are not read), sent twice (the put of b assumes a create); the
        // commit.
        assert_eq!(
            total, 5,
            "requests of a read then the batched one-request commit"
        );
    } else {
        assert!(total >= 5, "the workload makes requests: {total}");
    }
    let mut runs = Vec::new();
    for k in 1..=total {
        for fault in [Fault::CrashBefore, Fault::CrashAfter, Fault::LoseOne] {
            for rec in [
                Recovery::ResumeCommit,
                Recovery::ResumeRollback,
                Recovery::Competitor,
            ] {
                // LoseOne leaves a live coordinator; one recovery kind is enough for it.
                if fault == Fault::LoseOne && rec != Recovery::ResumeRollback {
                    continue;
                }
                runs.push((fault, k, rec));
            }
        }
    }
    let sem = Arc::new(tokio::sync::Semaphore::new(6));
    let mut handles = Vec::new();
    for (fault, k, rec) in runs {
        let env = env.clone();
        let permit = sem.clone().acquire_owned().await.unwrap();
        handles.push(tokio::spawn(async move {
            one_run(env, w, one_shot, fault, k, rec).await;
            drop(permit);
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    let images = env.scan_all(env.manager.images_table()).await;
    assert!(images.is_empty(), "images left: {images:?}");
    eprintln!(
        "{w:?} one_shot={one_shot}: {total} requests, every fault at each, in {:.1?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_buffered_one_shot() {
    sweep_matrix(Workload::Buffered, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_buffered_phased() {
    sweep_matrix(Workload::Buffered, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_interactive_one_shot() {
    sweep_matrix(Workload::Interactive, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_interactive_phased() {
    sweep_matrix(Workload::Interactive, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_during_rollback() {
    sweep_matrix(Workload::RolledBack, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_batched_writes_one_shot() {
    sweep_matrix(Workload::BatchedWrites, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_batched_writes_phased() {
    sweep_matrix(Workload::BatchedWrites, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_batched_after_a_read_one_shot() {
    sweep_matrix(Workload::Batched, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_batched_after_a_read_phased() {
    sweep_matrix(Workload::Batched, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_batched_inserts_one_shot() {
    sweep_matrix(Workload::BatchedInserts, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_batched_inserts_phased() {
    sweep_matrix(Workload::BatchedInserts, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_rolled_forward_phased() {
    sweep_matrix(Workload::RolledForward, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_rolled_forward_unjudged_phased() {
    sweep_matrix(Workload::RolledForwardUnjudged, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_reads_then_writes_one_shot() {
    sweep_matrix(Workload::ReadsThenWrites, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_reads_then_writes_phased() {
    sweep_matrix(Workload::ReadsThenWrites, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_recorded_reads_then_writes_one_shot() {
    sweep_matrix(Workload::RecordedReadsThenWrites, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_on_demand_reads_then_writes_one_shot() {
    sweep_matrix(Workload::OnDemandReadsThenWrites, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_on_demand_reads_then_writes_phased() {
    sweep_matrix(Workload::OnDemandReadsThenWrites, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_locked_reads_then_writes_one_shot() {
    sweep_matrix(Workload::LockedReadsThenWrites, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_buffered_chunked_one_shot() {
    sweep_matrix(Workload::BufferedChunked, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_buffered_chunked_phased() {
    sweep_matrix(Workload::BufferedChunked, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_batched_chunked_one_shot() {
    sweep_matrix(Workload::BatchedChunked, true).await;
}

/// Waiting in ticket order: the queued lock attempts, the registrations read after the decision
/// and the merged unlocks, with a crash or a lost answer at each request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_queued_phased() {
    sweep_matrix(Workload::Queued, false).await;
}

/// The same through the one-request commit, which learns the registrations from its first,
/// cancelled, request and carries them in its second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_queued_one_shot() {
    sweep_matrix(Workload::Queued, true).await;
}

/// Reads then buffered writes, waiting in ticket order, with batched locks (refused by a queue)
/// and the one-request commit carrying the registrations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_queued_batched_one_shot() {
    sweep_matrix(Workload::QueuedReadsThenWrites, true).await;
}

/// Through the DynamoDB profile only (`DDB_PROFILE=dynamodb`, a configuration of `scripts/test`):
/// the hundred-item transaction's concurrent batches are what DynamoDB's conflict rule tests, and
/// the sweep is the suite's longest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_gated_phased() {
    if profile().is_none() {
        eprintln!(
            "crash_gated_phased runs through the DynamoDB profile only (DDB_PROFILE=dynamodb)"
        );
        return;
    }
    sweep_matrix(Workload::Gated, false).await;
}
