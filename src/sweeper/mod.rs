//! Operations: the sweeper that finishes what crashed coordinators left behind, and read-only
//! inspection of TX records for operators.
//!
//! [`TransactionManager::sweep`] scans the transactions table (in parallel segments) and, for each
//! record:
//!
//! | record | what the sweeper does |
//! |---|---|
//! | pending, idle longer than [`SweepOptions::rollback_after`] | rolls it back (restores applied items, releases locks, finalizes) |
//! | pending, more recent | leaves it alone (its coordinator may still be driving it) |
//! | committed or rolled back, not finalized, idle longer than [`SweepOptions::complete_after`] | completes it: unlocks or restores every item, finalizes |
//! | finalized, idle longer than [`SweepOptions::delete_after`] (when set) | deletes the record |
//! | finalized, otherwise | leaves it (to DynamoDB TTL, see [`Settings::record_ttl`](crate::Settings::record_ttl)) |
//! | a request row (`_TxN > 0`) whose header is gone (deleted by TTL, or a delete interrupted after the header) | deletes it |
//!
//! Then, for the user tables named in [`SweepOptions::tables_to_scan`], it releases locks held by
//! transactions whose record is gone (when the item's write was never applied; applied ones are
//! reported for an operator; a lock taken without a record by
//! [`Settings::record_on_demand`](crate::Settings::record_on_demand) only once it is older than
//! `rollback_after`, since its transaction may still be running) and completes finalized
//! transactions that still hold a lock, and takes off waiters' marks left by waiters that died
//! (expired, or written `rollback_after` ago); it also scans, for locks taken without a record only,
//! the tables listed as holding such locks ([`SweepOptions::scan_unrecorded_tables`]). Last, it
//! deletes images-table before-images whose transaction is finalized or gone (except those that a
//! reported applied lock points to). It never deletes a record that is not finalized.
//!
//! A pending record is rolled back only as it was judged idle: the decision is conditional on the
//! version and the last-update time read when judging, so a coordinator that appended or sent a
//! heartbeat meanwhile keeps its transaction (the sweeper leaves it alone and never decides a
//! version it did not judge).
//!
//! Idleness is the record's last-update time (`_TxD`, written by the coordinator's wall clock)
//! compared with this machine's wall clock: choose `rollback_after` well above the longest
//! transaction plus the clock skew between machines. Rolling back a transaction that is still alive
//! is safe (it then fails with [`Error::RolledBack`]) but wasteful.
//!
//! [`TransactionManager::sweep`]: crate::TransactionManager::sweep
//! [`Error::RolledBack`]: crate::Error::RolledBack

mod background;
mod inspect;
mod options;
mod pass;
mod report;
mod scan;
mod sweep;

use std::time::Duration;

pub use background::Sweeper;
pub use inspect::{ItemStatus, RequestInfo, RequestKind, TxDetails, TxSummary};
pub use options::{ListOptions, SweepOptions};
pub use report::{OrphanLock, SlicesRead, SweepFailure, SweepReport};
pub use scan::{ScanPhase, ScanProgress};

fn age_ms(now: u64, updated_ms: u64) -> u64 {
    now.saturating_sub(updated_ms)
}

fn millis(d: Duration) -> u64 {
    d.as_millis().min(u64::MAX as u128) as u64
}
