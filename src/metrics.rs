//! Metric names, label values and the one-line helpers the protocol calls at its phase boundaries.
//!
//! Everything goes through the [`metrics`] facade: without a recorder installed by the
//! application every call is a no-op. Every name starts with `dynamodb_tx_`; labels take only the
//! small fixed sets of values below (never a transaction id, table or key). `docs/OPERATIONS.md`
//! ("Metrics") lists each metric with its type, labels and meaning.

use std::time::Instant;

use ::metrics::{counter, histogram};

use crate::error::Error;

/// Transactions committed, by `path`.
pub(crate) const COMMITS: &str = "dynamodb_tx_commits_total";
/// Writes of phased commits by this process applied after the commit point (roll-forward).
pub(crate) const ROLLED_FORWARD: &str = "dynamodb_tx_rolled_forward_writes_total";
/// Transactions this process rolled back (its conditional flip to rolled back landed), by `cause`.
pub(crate) const ROLLBACKS: &str = "dynamodb_tx_rollbacks_total";
/// `commit` calls that returned an error, by `kind`.
pub(crate) const COMMIT_ERRORS: &str = "dynamodb_tx_commit_errors_total";
/// Commits that gave up after a commit request may have landed, and read the record to resolve.
pub(crate) const COMMITS_IN_DOUBT: &str = "dynamodb_tx_commits_in_doubt_total";
/// Lock attempts that met a pending, older transaction and waited for it.
pub(crate) const CONTENTION_WAITS: &str = "dynamodb_tx_contention_waits_total";
/// Pending transactions holding a needed item that this process decided to roll back.
pub(crate) const CONTENTION_WOUNDS: &str = "dynamodb_tx_contention_wounds_total";
/// First attempts that gave up rather than wait, holding other locks, for a retry.
pub(crate) const CONTENTION_YIELDS: &str = "dynamodb_tx_contention_yields_total";
/// Retries, by `kind`.
pub(crate) const RETRIES: &str = "dynamodb_tx_retries_total";
/// Dropped transaction handles whose background rollback was started.
pub(crate) const DROPPED: &str = "dynamodb_tx_dropped_handles_total";
/// Sweeper actions, by `action`.
pub(crate) const SWEEPER_ACTIONS: &str = "dynamodb_tx_sweeper_actions_total";
/// Distributed locks acquired, by `lock` and `how`.
pub(crate) const LOCK_ACQUISITIONS: &str = "dynamodb_tx_lock_acquisitions_total";
/// Distributed locks released by their holder, by `lock`.
pub(crate) const LOCK_RELEASES: &str = "dynamodb_tx_lock_releases_total";
/// Lock acquisitions that gave up at their deadline, by `lock`.
pub(crate) const LOCK_TIMEOUTS: &str = "dynamodb_tx_lock_timeouts_total";
/// Held (or queued) locks found lost.
pub(crate) const LOCK_LOST: &str = "dynamodb_tx_lock_lost_total";
/// Seconds spent in one protocol phase of one transaction, by `phase`.
pub(crate) const PHASE_SECONDS: &str = "dynamodb_tx_phase_seconds";

/// `path` of [`COMMITS`]: the write-only fast path (one `TransactWriteItems`, no locks).
pub(crate) const FAST_PATH: &str = "fast_path";
/// `path` of [`COMMITS`]: locked, then committed with one `TransactWriteItems`.
pub(crate) const ONE_REQUEST: &str = "one_request";
/// `path` of [`COMMITS`]: locked, applied, then the record flipped on its own.
pub(crate) const PHASED: &str = "phased";
/// `path` of [`COMMITS`]: one item read and written without a record (`Settings::record_on_demand`),
/// committed with one conditional write on it.
pub(crate) const WITHOUT_RECORD: &str = "without_record";

/// `cause` of [`ROLLBACKS`]: a `rollback` call decided it (the application's, `run` cleaning up
/// a failed attempt, a contending coordinator's wound, a dropped handle's background rollback).
pub(crate) const REQUESTED: &str = "requested";
/// `cause` of [`ROLLBACKS`]: a request's condition was false.
pub(crate) const CONDITION_FAILED: &str = "condition_failed";
/// `cause` of [`ROLLBACKS`]: DynamoDB rejected a request when it was applied.
pub(crate) const REQUEST_REJECTED: &str = "request_rejected";
/// `cause` of [`ROLLBACKS`]: an item had no room for the lock attributes.
pub(crate) const INVALID_REQUEST: &str = "invalid_request";
/// `cause` of [`ROLLBACKS`]: a commit gave up after a commit request may have landed and rolled
/// back so that it cannot land later.
pub(crate) const IN_DOUBT: &str = "in_doubt";
/// `cause` of [`ROLLBACKS`]: the sweeper rolled back an idle transaction.
pub(crate) const SWEEPER: &str = "sweeper";
/// Rollback cause: a contending transaction wounded it (its conditional decision landed).
pub(crate) const WOUNDED: &str = "wounded";
/// `cause` of [`ROLLBACKS`]: a read released to take an item in key order
/// (`Settings::reorder_held_reads`) changed before it was taken back, or taking it back failed.
pub(crate) const READ_CHANGED: &str = "read_changed";

/// `kind` of [`RETRIES`]: `run` runs the unit of work again.
pub(crate) const RUN_ATTEMPT: &str = "run_attempt";
/// `kind` of [`RETRIES`]: an item lock attempt repeated after an ambiguous failure.
pub(crate) const LOCK_AMBIGUOUS: &str = "lock_ambiguous";
/// `kind` of [`RETRIES`]: a batch of locks (`Settings::batch_locks`) did not land as a whole; its
/// items are locked one by one.
pub(crate) const LOCK_BATCH_FALLBACK: &str = "lock_batch_fallback";
/// `kind` of [`RETRIES`]: a batch of locks was cancelled only because items it took for existing
/// were absent (or the reverse), and is sent once more with their placeholders.
pub(crate) const LOCK_BATCH_ABSENT: &str = "lock_batch_absent";
/// `kind` of [`RETRIES`]: a commit attempt repeated (throttled, in conflict, or the record moved).
pub(crate) const COMMIT_ATTEMPT: &str = "commit_attempt";

/// `phase` of [`PHASE_SECONDS`]: writing requests to the TX record (with the batched locks, when
/// they go in the request that creates it).
pub(crate) const RECORD: &str = "record";
/// `phase` of [`PHASE_SECONDS`]: locking the items (including contention waits).
pub(crate) const LOCK: &str = "lock";
/// `phase` of [`PHASE_SECONDS`]: the commit itself (fast path, one request, or phased).
pub(crate) const COMMIT: &str = "commit";
/// `phase` of [`PHASE_SECONDS`]: settling the items of a decided transaction and finalizing.
pub(crate) const SETTLE: &str = "settle";

/// `lock` label: the FIFO queue lock (`lock::QueueLock`).
pub(crate) const QUEUE_LOCK: &str = "queue";
/// `lock` label: the lease lock (`lock::LeaseLock`).
pub(crate) const LEASE_LOCK: &str = "lease";

/// Counts a commit by its path.
pub(crate) fn committed(path: &'static str) {
    counter!(COMMITS, "path" => path).increment(1);
}

/// Counts the writes a phased commit of this process rolled forward.
pub(crate) fn rolled_forward(writes: usize) {
    counter!(ROLLED_FORWARD).increment(writes as u64);
}

/// Counts a rollback this process decided.
pub(crate) fn rolled_back(cause: &'static str) {
    counter!(ROLLBACKS, "cause" => cause).increment(1);
}

/// Counts the error of a `commit` call, by kind.
pub(crate) fn commit_result(r: &Result<(), Error>) {
    if let Err(e) = r {
        counter!(COMMIT_ERRORS, "kind" => error_kind(e)).increment(1);
    }
}

/// Counts a commit resolving an in-doubt commit request.
pub(crate) fn commit_in_doubt() {
    counter!(COMMITS_IN_DOUBT).increment(1);
}

/// Counts a contention wait.
pub(crate) fn contention_wait() {
    counter!(CONTENTION_WAITS).increment(1);
}

/// Counts a wound: a pending holder this process decided to roll back.
pub(crate) fn contention_wound() {
    counter!(CONTENTION_WOUNDS).increment(1);
}

/// Counts a first attempt giving itself up to a retry it met.
pub(crate) fn contention_yield() {
    counter!(CONTENTION_YIELDS).increment(1);
}

/// Counts a retry.
pub(crate) fn retry(kind: &'static str) {
    counter!(RETRIES, "kind" => kind).increment(1);
}

/// Counts a dropped handle whose background rollback starts.
pub(crate) fn dropped_handle() {
    counter!(DROPPED).increment(1);
}

/// Counts `n` sweeper actions of one kind (`rolled_back`, `completed`, `deleted`, ...); nothing
/// when `n` is 0.
pub(crate) fn sweeper_actions(action: &'static str, n: u64) {
    if n > 0 {
        counter!(SWEEPER_ACTIONS, "action" => action).increment(n);
    }
}

/// Counts an acquired distributed lock, by how: taken over from a holder judged dead
/// (`takeover`), handed over after waiting for a live holder (`handoff`), or found free (`free`).
pub(crate) fn lock_acquired(lock: &'static str, takeover: bool, waited: bool) {
    let how = match (takeover, waited) {
        (true, _) => "takeover",
        (false, true) => "handoff",
        (false, false) => "free",
    };
    counter!(LOCK_ACQUISITIONS, "lock" => lock, "how" => how).increment(1);
}

/// Counts a released distributed lock.
pub(crate) fn lock_released(lock: &'static str) {
    counter!(LOCK_RELEASES, "lock" => lock).increment(1);
}

/// Counts a failed acquisition if it timed out.
pub(crate) fn lock_failed(lock: &'static str, timed_out: bool) {
    if timed_out {
        lock_timeout(lock);
    }
}

/// Counts an acquisition that gave up at its deadline.
pub(crate) fn lock_timeout(lock: &'static str) {
    counter!(LOCK_TIMEOUTS, "lock" => lock).increment(1);
}

/// Counts a lock found lost.
pub(crate) fn lock_lost() {
    counter!(LOCK_LOST).increment(1);
}

/// Records the seconds from its creation to its drop in [`PHASE_SECONDS`] (so every exit of a
/// phase, early returns and errors included, is measured).
pub(crate) struct PhaseTimer {
    phase: &'static str,
    start: Instant,
}

impl PhaseTimer {
    /// Starts timing `phase`.
    pub(crate) fn start(phase: &'static str) -> PhaseTimer {
        PhaseTimer {
            phase,
            start: Instant::now(),
        }
    }
}

impl Drop for PhaseTimer {
    fn drop(&mut self) {
        histogram!(PHASE_SECONDS, "phase" => self.phase).record(self.start.elapsed().as_secs_f64());
    }
}

/// A short, fixed name for an error's variant: the `kind` label of [`COMMIT_ERRORS`] and the
/// `error.kind` field of the `commit`, `rollback` and `run` spans.
pub(crate) fn error_kind(e: &Error) -> &'static str {
    match e {
        Error::RolledBack { .. } => "rolled_back",
        Error::AlreadyCommitted { .. } => "already_committed",
        Error::CommittedWithout { .. } => "committed_without",
        Error::UnknownOutcome { .. } => "unknown_outcome",
        Error::Undetermined { .. } => "undetermined",
        Error::TransactionNotFound { .. } => "transaction_not_found",
        Error::DuplicateRequest { .. } => "duplicate_request",
        Error::InvalidRequest { .. } => "invalid_request",
        Error::ItemLocked { .. } => "item_locked",
        Error::ConditionFailed { .. } => "condition_failed",
        Error::RequestRejected { .. } => "request_rejected",
        Error::TransactionFinished { .. } => "transaction_finished",
        Error::TableNotFound { .. } => "table_not_found",
        Error::TableMismatch { .. } => "table_mismatch",
        Error::ReadContention { .. } => "read_contention",
        Error::DynamoDb { .. } => "dynamodb",
        Error::Serde(_) => "serde",
        Error::Invariant(_) => "invariant",
        #[allow(unreachable_patterns)]
        _ => "other",
    }
}

/// Records the outcome of `run` (and how many attempts it made) on its span; returns `r`.
pub(crate) fn run_result<T>(r: Result<T, Error>, attempts: u32) -> Result<T, Error> {
    tracing::Span::current().record("attempts", attempts);
    record_outcome(&r, "committed");
    r
}

/// Records `outcome` (`committed`, `rolled_back` or `failed`) and, for an error, `error.kind` on
/// the current span (fields the span declared `Empty`).
pub(crate) fn record_outcome<T>(r: &Result<T, Error>, ok: &'static str) {
    let span = tracing::Span::current();
    match r {
        Ok(_) => {
            span.record("outcome", ok);
        }
        Err(e) => {
            let outcome = match e {
                Error::RolledBack { .. }
                | Error::ConditionFailed { .. }
                | Error::RequestRejected { .. } => "rolled_back",
                Error::AlreadyCommitted { .. } => "committed",
                Error::CommittedWithout { .. } => "committed_without",
                Error::Undetermined { .. } | Error::UnknownOutcome { .. } => "unknown",
                _ => "failed",
            };
            span.record("outcome", outcome);
            span.record("error.kind", error_kind(e));
        }
    }
}
