//! The coordinators of chaos workloads: each with its own crashes, lost answers, throttling and
//! delays.

use dynamodb_transactions::TransactionManager;
use dynamodb_transactions::fault::{Delayer, FaultInjector, Throttler};

use super::{TestEnv, client_with_delays, shared};

/// Once every coordinator is gone: the sweeper finishes at once whatever they left, scanning
/// `tables` for read locks that a crashed coordinator's record never named, and meets no error.
pub async fn sweep_left_work(env: &TestEnv, tables: &[&str]) {
    let mut options = dynamodb_transactions::sweeper::SweepOptions::new()
        .rollback_after(std::time::Duration::ZERO)
        .complete_after(std::time::Duration::ZERO);
    if !tables.is_empty() {
        options = options.tables_to_scan(tables.iter().map(|t| t.to_string()));
    }
    let report = env.manager.sweep(&options).await.unwrap();
    assert!(
        report.errors.is_empty(),
        "sweep errors: {:?}",
        report.errors
    );
}

/// One coordinator of a chaos workload, with its own faults: a fault injector for crashes and lost
/// responses, 3 % of responses throttled after the server applied them, and a quarter of the
/// requests delayed up to 100 ms before going out and/or after the answer, all seeded from the run's
/// seed and the worker's number.
pub struct ChaosWorker {
    pub manager: TransactionManager,
    pub faults: FaultInjector,
    /// A second injector, for lost answers beside the crashes of `faults` (unarmed unless a
    /// workload arms it).
    pub lost: FaultInjector,
    pub throttle: Throttler,
    pub delays: Delayer,
}

impl ChaosWorker {
    /// Worker `w` on `env`'s tables. Odd workers commit in phases, so both commit paths meet the
    /// faults, and worker 1 of every four rolls its writes forward past the commit
    /// (`roll_forward`); workers 2 and 3 of every four lock their reads before recording them (the
    /// first lock with the record's creation, tombstones); crashed coordinators hold their locks
    /// until contenders find them dead (2 s).
    pub fn new(env: &TestEnv, seed: u64, w: usize) -> ChaosWorker {
        Self::with(env, seed, w, |_| {})
    }

    /// [`new`](Self::new), with `more` applied to its settings last.
    pub fn with(
        env: &TestEnv,
        seed: u64,
        w: usize,
        more: impl FnOnce(&mut dynamodb_transactions::Settings),
    ) -> ChaosWorker {
        let faults = FaultInjector::new();
        let lost = FaultInjector::new();
        let throttle = Throttler::new(0.03, seed ^ (w as u64 + 1));
        let delays = Delayer::new(
            0.25,
            std::time::Duration::from_millis(100),
            seed.rotate_left(17) ^ (w as u64 + 1),
        );
        let manager = TransactionManager::builder(client_with_delays(
            vec![
                shared(faults.clone()),
                shared(lost.clone()),
                shared(throttle.clone()),
            ],
            Some(&delays),
        ))
        .transactions_table(env.manager.transactions_table())
        .images_table(env.manager.images_table())
        .configure(|s| {
            s.rollback_on_drop = false;
            if w % 2 == 1 {
                s.one_shot_max_items = 0;
            }
            // Each way of taking locked reads: a quarter of the workers lock first, a quarter
            // record first, the rest send both together (the default).
            s.locked_reads = match w % 4 {
                2 => dynamodb_transactions::LockedReads::LockThenRecord,
                3 => dynamodb_transactions::LockedReads::RecordThenLock,
                _ => dynamodb_transactions::LockedReads::RecordWithLock,
            };
            s.roll_forward = w % 4 == 1;
            // A record only when needed (the default) on workers 0, 1, 4, 5...: a first read's
            // lock without a record beside ones that create it, crossing the other mixes.
            s.record_on_demand = (w / 2).is_multiple_of(2);
            // Coordinators with and without the wait for younger running holders, side by side.
            s.wait_for_running_holders = w.is_multiple_of(3);
            // Reads released and taken back in key order on half of them, a quarter of all
            // keeping their turns at the released items.
            s.reorder_held_reads = w.is_multiple_of(2);
            s.reorder_keeps_turn = w % 4 == 2;
            // Waiters far back in the line looking by reading on workers 1, 2, 4, 5...
            s.line_looks_read = !w.is_multiple_of(3);
            // Handovers on workers 0, 2, 3, 5, 6...: on the ones that also lock a first read
            // without a record (0, 5, 8, 9...), their commits hand items to waiters that named
            // themselves, beside coordinators whose waiters do not.
            s.hand_over = w % 3 != 1;
            s.lock_wait = std::time::Duration::from_secs(3);
            s.contention = dynamodb_transactions::ContentionPolicy::Ordered {
                dead_after: std::time::Duration::from_secs(2),
                ticket_at_begin: false,
            };
            more(s);
        })
        .build();
        ChaosWorker {
            manager,
            faults,
            lost,
            throttle,
            delays,
        }
    }
}
