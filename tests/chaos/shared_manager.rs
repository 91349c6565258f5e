//! Chaos with tasks of one process sharing its manager: they wait for each other in process and
//! die together (see the test).

use std::sync::Arc;
use std::time::Duration;

use dynamodb_transactions::fault::{FaultInjector, FaultMode};
use rand::{Rng, SeedableRng};

use super::{
    COUNTER, Stats, assert_counted, assert_records_finalized, balance, increment, open_accounts,
    sweep_and_scan, transfer,
};
use crate::common::*;

/// Tasks of one process share its manager, so they wait for each other in process (told the
/// handover, or woken when the item is let go) rather than by looks at DynamoDB, and die together:
/// three processes of four tasks increment the counter (two steps in three) and transfer between
/// four accounts, with throttling, delays and an answer lost every 1–120 requests of a process
/// (whichever task sent it carries on); a process dies at a random request in its first life and
/// in about one of its next two, every task of it stopped at once as a killed process's would
/// be, and starts again with a new manager; one attempt in eight has its future dropped after up
/// to 30 ms, before its commit, and is rolled back or abandoned. What the dead left goes to the
/// other processes and the sweeper; the counter and the total end exact, and every outcome a
/// living task was told (lost answers included) is checked against the counter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_sharing_a_manager_survive_their_process_dying_and_their_futures_dropped() {
    let (seed, scale) = seed_and_scale("CHAOS_SEED", 10842988599556174014, "CHAOS_SCALE");
    println!("chaos seed {seed} (replay with CHAOS_SEED={seed}), scale {scale}");
    let started = std::time::Instant::now();
    let env = TestEnv::new("chaos-shared").await;
    let accounts = 4;
    open_accounts(&env, accounts).await;
    let processes = (0..3).map(|p| shared_process(&env, seed, p, 4, 10 * scale, accounts));
    let mut total = Stats::default();
    for st in futures::future::join_all(processes).await {
        total += st;
    }
    let t = &total;
    println!(
        "chaos: {} increments committed, {} rolled back, {} transfers committed, {} declined, {} \
         attempts retried, {} cut short; {} processes died of {} crashes armed; {} answers lost; \
         {} throttled responses, {} requests delayed; {:.1}s",
        t.incremented.len(),
        t.not_incremented.len(),
        t.committed,
        t.declined,
        t.retried,
        t.cut,
        t.deaths,
        t.crashes_armed,
        t.faults_struck,
        t.throttled,
        t.delayed,
        started.elapsed().as_secs_f64()
    );
    assert!(
        t.deaths > 0 && t.faults_struck > 0 && t.cut > 0 && t.throttled > 0 && t.delayed > 0,
        "faults were injected"
    );
    assert!(
        !t.incremented.is_empty() && t.committed > 0,
        "the workload made progress"
    );
    let mut items = sweep_and_scan(&env, seed).await;
    assert_counted(&items, t, seed);
    items.retain(|i| i["Id"] != s(COUNTER));
    assert_eq!(items.len(), accounts, "no account created or lost");
    let sum: i64 = items.iter().map(balance).sum();
    assert_eq!(sum, 100 * accounts as i64, "total conserved (seed {seed})");
    assert_records_finalized(&env, seed).await;
}

/// Process `p` of [`tasks_sharing_a_manager_survive_their_process_dying_and_their_futures_dropped`]:
/// `tasks` tasks sharing one manager take `tasks * steps` steps between them, over as many lives
/// as it takes. It dies at a random request of its first life, and of its second and third with
/// probability one half each: once the crash strikes, every task of that life is aborted at once.
async fn shared_process(
    env: &TestEnv,
    seed: u64,
    p: usize,
    tasks: usize,
    steps: usize,
    accounts: usize,
) -> Stats {
    let left = Arc::new(std::sync::atomic::AtomicUsize::new(tasks * steps));
    let stats = Arc::new(std::sync::Mutex::new(Stats::default()));
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed.wrapping_add(p as u64 * 7727));
    let mut life = 0;
    while left.load(std::sync::atomic::Ordering::SeqCst) > 0 {
        // Handovers, and records only when needed, on every life: the holders of the counter
        // commit in one write that hands it to a waiter, told in process when it is a task here.
        let ChaosWorker {
            manager,
            faults,
            lost,
            throttle,
            delays,
        } = ChaosWorker::with(env, seed, p * 10 + life, |s| {
            s.hand_over = true;
            s.record_on_demand = true;
        });
        if life == 0 || (life < 3 && rng.random_bool(0.5)) {
            let mode = if rng.random_bool(0.5) {
                FaultMode::BeforeSend
            } else {
                FaultMode::AfterSend
            };
            faults.crash_at(rng.random_range(1..=100), mode);
            stats.lock().unwrap().crashes_armed += 1;
        }
        let handles: Vec<_> = (0..tasks)
            .map(|k| {
                tokio::spawn(shared_task(
                    (manager.clone(), faults.clone()),
                    env.table.clone(),
                    (left.clone(), stats.clone()),
                    rand::rngs::StdRng::seed_from_u64(rng.random()),
                    (accounts, seed, p * 100 + k),
                ))
            })
            .collect();
        let mut lost_armed = false;
        while !handles.iter().all(|h| h.is_finished()) {
            // An answer lost now and then, to whichever task's request it falls on: that task
            // carries on (the library resolves what it does not know).
            if !lost_armed || lost.struck() {
                let mut st = stats.lock().unwrap();
                st.faults_struck += u64::from(lost.struck());
                st.lost_armed += 1;
                lost.fail_once_at(rng.random_range(1..=120), FaultMode::AfterSend);
                lost_armed = true;
            }
            if faults.struck() {
                // The process dies: none of its tasks sends anything more.
                for h in &handles {
                    h.abort();
                }
                stats.lock().unwrap().deaths += 1;
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        for h in handles {
            if let Err(e) = h.await
                && e.is_panic()
            {
                std::panic::resume_unwind(e.into_panic());
            }
        }
        let mut st = stats.lock().unwrap();
        st.throttled += throttle.injected();
        st.delayed += delays.injected();
        drop(st);
        life += 1;
    }
    std::mem::take(&mut *stats.lock().unwrap())
}

/// One task of a [`shared_process`]: takes steps from `left` until none is left, each an
/// increment of the counter (two in three) or a transfer, tried until it commits, is declined,
/// or meets its process's death. Its outcomes go to `stats` as they come, since the task may be
/// aborted at any await.
async fn shared_task(
    (m, faults): (dynamodb_transactions::TransactionManager, FaultInjector),
    table: String,
    (left, stats): (
        Arc<std::sync::atomic::AtomicUsize>,
        Arc<std::sync::Mutex<Stats>>,
    ),
    mut rng: rand::rngs::StdRng,
    (accounts, seed, w): (usize, u64, usize),
) {
    use std::sync::atomic::Ordering::SeqCst;
    while left
        .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
        .is_ok()
    {
        let counts = rng.random_range(0..3) != 0;
        let from = rng.random_range(0..accounts);
        let to = (from + rng.random_range(1..accounts)) % accounts;
        let amount = rng.random_range(1..30);
        for _attempt in 0..50 {
            let tx = m.begin();
            let id = tx.id().to_string();
            let body = async {
                if counts {
                    increment(&tx, &table).await.map(|()| true)
                } else {
                    transfer(&tx, &table, (from, to), amount).await
                }
            };
            let r = if rng.random_range(0..8) == 0 {
                let cut_after = Duration::from_millis(rng.random_range(0..30));
                tokio::time::timeout(cut_after, body).await.ok()
            } else {
                Some(body.await)
            };
            let declined = matches!(r, Some(Ok(false)));
            let outcome = match r {
                // Dropped midway, before its commit: it applied nothing, whoever finishes it.
                None => {
                    if rng.random_bool(0.5) {
                        let _ = tx.rollback().await;
                    } else {
                        tx.abandon();
                    }
                    let mut st = stats.lock().unwrap();
                    st.cut += 1;
                    if counts {
                        st.not_incremented.push(id);
                    }
                    continue;
                }
                Some(Ok(true)) => tx.commit().await,
                Some(Ok(false)) => tx.rollback().await,
                Some(Err(e)) => {
                    tx.abandon();
                    Err(e)
                }
            };
            let mut st = stats.lock().unwrap();
            match outcome {
                Ok(()) if declined => st.declined += 1,
                Ok(()) if counts => st.incremented.push(id),
                Ok(()) => st.committed += 1,
                // The process is dying: what this attempt left goes to the other processes.
                Err(_) if faults.struck() => return,
                Err(e) if e.is_retryable() || e.is_undetermined() => {
                    if counts && !e.is_undetermined() {
                        st.not_incremented.push(id);
                    }
                    st.retried += 1;
                    continue;
                }
                Err(e) => panic!("task {w}: unexpected error (seed {seed}): {e}"),
            }
            break;
        }
    }
}
