//! What a sweep does and what a listing shows: [`SweepOptions`] and [`ListOptions`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::scan::{ProgressFn, ScanProgress};
use crate::record::TxState;

/// What [`TransactionManager::sweep`] does. Build with [`SweepOptions::new`] (the production
/// defaults) or [`SweepOptions::finish_everything_now`] (settle everything regardless of age), and
/// the setters. Thresholds are [`Duration`]s of idleness: how long a record has not changed.
///
/// ```
/// use std::time::Duration;
/// use dynamodb_transactions::sweeper::SweepOptions;
/// let options = SweepOptions::new()
///     .rollback_after(Duration::from_secs(600))
///     .delete_after(Some(Duration::from_secs(86_400)))
///     .tables_to_scan(["Accounts"]);
/// assert_eq!(options.segments_count(), 4);
/// ```
///
/// [`TransactionManager::sweep`]: crate::TransactionManager::sweep
#[derive(Clone)]
#[must_use]
pub struct SweepOptions {
    pub(super) rollback_after: Duration,
    pub(super) complete_after: Duration,
    pub(super) delete_after: Option<Duration>,
    pub(super) segments: u32,
    pub(super) concurrency: usize,
    pub(super) dry_run: bool,
    pub(super) images: bool,
    pub(super) tables_to_scan: Vec<String>,
    pub(super) scan_unrecorded_tables: bool,
    pub(super) unrecorded_slices: u32,
    pub(super) unrecorded_period: Duration,
    pub(super) progress: Option<ProgressFn>,
}

impl Default for SweepOptions {
    fn default() -> Self {
        SweepOptions {
            rollback_after: Duration::from_secs(300),
            complete_after: Duration::from_secs(60),
            delete_after: None,
            segments: 4,
            concurrency: 8,
            dry_run: false,
            images: true,
            tables_to_scan: Vec::new(),
            scan_unrecorded_tables: true,
            unrecorded_slices: 96,
            unrecorded_period: Duration::from_secs(86_400),
            progress: None,
        }
    }
}

impl fmt::Debug for SweepOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SweepOptions")
            .field("rollback_after", &self.rollback_after)
            .field("complete_after", &self.complete_after)
            .field("delete_after", &self.delete_after)
            .field("segments", &self.segments)
            .field("concurrency", &self.concurrency)
            .field("dry_run", &self.dry_run)
            .field("images", &self.images)
            .field("tables_to_scan", &self.tables_to_scan)
            .field("scan_unrecorded_tables", &self.scan_unrecorded_tables)
            .field("unrecorded_slices", &self.unrecorded_slices)
            .field("unrecorded_period", &self.unrecorded_period)
            .field("progress", &self.progress.as_ref().map(|_| "callback"))
            .finish()
    }
}

impl SweepOptions {
    /// The defaults: roll back pending transactions idle for 5 minutes, complete decided ones idle
    /// for 1 minute, keep finalized records (for TTL), 4 scan segments, 8 records in flight per
    /// segment, sweep images, scan no user table but for locks taken without a record (see
    /// [`scan_unrecorded_tables`](Self::scan_unrecorded_tables)).
    pub fn new() -> Self {
        Self::default()
    }

    /// The preset "finish everything now": roll back every pending transaction and complete every
    /// decided, unfinalized one, whatever its age ([`rollback_after`](Self::rollback_after) and
    /// [`complete_after`](Self::complete_after) are zero), and read every table listed as holding
    /// locks without record whole ([`unrecorded_scan_period`](Self::unrecorded_scan_period) is
    /// zero). Finalized records are kept; add `.delete_after(Some(Duration::ZERO))` to delete
    /// them too. Everything else is as in [`SweepOptions::new`] (orphaned images swept, no other
    /// user table scanned).
    ///
    /// For tests, maintenance windows, and operators once every coordinator has stopped. A pending
    /// transaction whose coordinator is still at work may be rolled back under it (unless the
    /// coordinator writes between the sweeper's read and its decision): nothing is lost or left
    /// half applied, as its coordinator finds the transaction rolled back, but the work is aborted.
    /// With coordinators running, keep the thresholds above your longest transaction.
    ///
    /// ```
    /// use std::time::Duration;
    /// use dynamodb_transactions::sweeper::SweepOptions;
    /// let options = SweepOptions::finish_everything_now();
    /// assert_eq!(options.rollback_after_value(), Duration::ZERO);
    /// assert_eq!(options.complete_after_value(), Duration::ZERO);
    /// assert_eq!(options.delete_after_value(), None);
    ///
    /// // Delete the finalized records as well:
    /// let options = SweepOptions::finish_everything_now().delete_after(Some(Duration::ZERO));
    /// assert_eq!(options.delete_after_value(), Some(Duration::ZERO));
    /// ```
    ///
    /// ```no_run
    /// # async fn demo(m: dynamodb_transactions::TransactionManager) -> dynamodb_transactions::Result<()> {
    /// use dynamodb_transactions::sweeper::SweepOptions;
    /// // Every coordinator has stopped: settle whatever they left.
    /// let report = m.sweep(&SweepOptions::finish_everything_now()).await?;
    /// println!("rolled back {}, completed {}", report.rolled_back.len(), report.completed.len());
    /// # Ok(()) }
    /// ```
    pub fn finish_everything_now() -> Self {
        Self::new()
            .rollback_after(Duration::ZERO)
            .complete_after(Duration::ZERO)
            .unrecorded_scan_period(Duration::ZERO)
    }

    /// Roll back a pending transaction once its record has not changed for this long (default 5
    /// minutes). Must exceed your longest transaction plus the clock skew between machines.
    pub fn rollback_after(mut self, d: Duration) -> Self {
        self.rollback_after = d;
        self
    }

    /// Complete a committed or rolled-back transaction that is not finalized once its record has not
    /// changed for this long (default 1 minute), leaving its own coordinator time to finish.
    pub fn complete_after(mut self, d: Duration) -> Self {
        self.complete_after = d;
        self
    }

    /// Delete finalized records once they have not changed for this long. `None` (the default)
    /// keeps them: let DynamoDB TTL remove them for free
    /// ([`Settings::record_ttl`](crate::Settings::record_ttl)), or delete them here.
    pub fn delete_after(mut self, d: Option<Duration>) -> Self {
        self.delete_after = d;
        self
    }

    /// Parallel scan segments per table (default 4, at least 1).
    pub fn segments(mut self, n: u32) -> Self {
        self.segments = n.max(1);
        self
    }

    /// Records (or items) handled at once per segment (default 8, at least 1).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// Only report what would be done; write nothing.
    pub fn dry_run(mut self, yes: bool) -> Self {
        self.dry_run = yes;
        self
    }

    /// Whether to delete orphaned images from the images table (default true).
    pub fn sweep_images(mut self, yes: bool) -> Self {
        self.images = yes;
        self
    }

    /// User tables to scan for orphaned locks (locks of transactions whose record is gone, or that
    /// are decided and finalized), and for waiters' marks and expired queue entries left by
    /// waiters that died ([`SweepReport::marks_removed`](super::SweepReport::marks_removed),
    /// [`SweepReport::queue_entries_removed`](super::SweepReport::queue_entries_removed)).
    /// Scanning reads the whole table, so it is opt-in; the default is none. Locks taken without a record are also found in the tables listed for them (see
    /// [`scan_unrecorded_tables`](Self::scan_unrecorded_tables)), without naming them here.
    pub fn tables_to_scan<I, S>(mut self, tables: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.tables_to_scan = tables.into_iter().map(Into::into).collect();
        self
    }

    /// Whether to scan, for locks taken without a record, the user tables where coordinators with
    /// [`Settings::record_on_demand`](crate::Settings::record_on_demand) took such locks (listed in
    /// a row of the transactions table before the first such lock on each table). Default true.
    ///
    /// Such a lock is in no record: a crashed coordinator's is released only by a contender or by
    /// this scan, which releases it (under a tombstone) once it is older than
    /// [`rollback_after`](Self::rollback_after), and leaves a younger one to its transaction. The
    /// lock carries no change, so until then readers see through it. The scan asks DynamoDB only
    /// for those locks, but reads (and is billed for) every item it passes: by default each
    /// listed table is read once a day, a slice at a time (see
    /// [`unrecorded_scan_period`](Self::unrecorded_scan_period)). Where no coordinator ever took
    /// such a lock, no table is listed and it costs one read of that row.
    ///
    /// ```
    /// use dynamodb_transactions::sweeper::SweepOptions;
    /// let options = SweepOptions::new().scan_unrecorded_tables(false);
    /// assert!(!options.scans_unrecorded_tables());
    /// ```
    pub fn scan_unrecorded_tables(mut self, yes: bool) -> Self {
        self.scan_unrecorded_tables = yes;
        self
    }

    /// How long one read of each table listed as holding locks without record is spread over
    /// (default 24 hours). Each such table is cut in
    /// [`unrecorded_table_slices`](Self::unrecorded_table_slices) slices, one of which comes due
    /// every `period / slices`, each in turn; a pass reads the slices that came due since the
    /// last pass of any sweeper of the transactions table read them (the time it read up to is
    /// kept in the row that lists the tables, and one conditional write claims them, so that two
    /// sweepers never read the same slices), and none while nothing came due. So every listed
    /// table is read whole once a period however often sweeps run (a pass after a period or more
    /// without one reads it whole once), and a crashed coordinator's lock without record that no
    /// contender meets is released at most `rollback_after` + `period` + the sweep interval +
    /// one pass after it was taken. A lost answer to the claim skips its slices until they come
    /// due again.
    ///
    /// `Duration::ZERO` reads every listed table whole at every pass, as
    /// [`finish_everything_now`](Self::finish_everything_now) does; so does a
    /// [`dry_run`](Self::dry_run), which writes nothing and so claims nothing. The tables of
    /// [`tables_to_scan`](Self::tables_to_scan) are always read whole.
    /// [`SweepReport::unrecorded_slices`](super::SweepReport::unrecorded_slices) says which slices
    /// a pass read.
    ///
    /// ```
    /// use std::time::Duration;
    /// use dynamodb_transactions::sweeper::SweepOptions;
    /// // Each listed table read once an hour, a 96th at a time.
    /// let options = SweepOptions::new().unrecorded_scan_period(Duration::from_secs(3600));
    /// assert_eq!(options.unrecorded_scan_period_value(), Duration::from_secs(3600));
    /// ```
    pub fn unrecorded_scan_period(mut self, period: Duration) -> Self {
        self.unrecorded_period = period;
        self
    }

    /// In how many slices each listed table is read over
    /// [`unrecorded_scan_period`](Self::unrecorded_scan_period) (default 96: a slice every 15
    /// minutes of a day; at least 1). A slice is `segments` of the `slices × segments` segments
    /// of a parallel scan, so the slices partition the table; more slices spread its read units
    /// more evenly over the period. Sweepers sharing a transactions table should use the same
    /// period and slices.
    ///
    /// ```
    /// use dynamodb_transactions::sweeper::SweepOptions;
    /// let options = SweepOptions::new().unrecorded_table_slices(24);
    /// assert_eq!(options.unrecorded_table_slices_count(), 24);
    /// ```
    pub fn unrecorded_table_slices(mut self, k: u32) -> Self {
        self.unrecorded_slices = k.max(1);
        self
    }

    /// Called after every scanned page (for progress bars). Must be quick.
    pub fn progress(mut self, f: impl Fn(&ScanProgress) + Send + Sync + 'static) -> Self {
        self.progress = Some(Arc::new(f));
        self
    }

    /// See [`SweepOptions::rollback_after`].
    pub fn rollback_after_value(&self) -> Duration {
        self.rollback_after
    }

    /// See [`SweepOptions::complete_after`].
    pub fn complete_after_value(&self) -> Duration {
        self.complete_after
    }

    /// See [`SweepOptions::delete_after`].
    pub fn delete_after_value(&self) -> Option<Duration> {
        self.delete_after
    }

    /// See [`SweepOptions::segments`].
    pub fn segments_count(&self) -> u32 {
        self.segments
    }

    /// See [`SweepOptions::unrecorded_table_slices`].
    pub fn unrecorded_table_slices_count(&self) -> u32 {
        self.unrecorded_slices
    }

    /// See [`SweepOptions::unrecorded_scan_period`].
    pub fn unrecorded_scan_period_value(&self) -> Duration {
        self.unrecorded_period
    }

    /// See [`SweepOptions::dry_run`].
    pub fn is_dry_run(&self) -> bool {
        self.dry_run
    }

    /// See [`SweepOptions::tables_to_scan`].
    pub fn scanned_tables(&self) -> &[String] {
        &self.tables_to_scan
    }

    /// See [`SweepOptions::scan_unrecorded_tables`].
    pub fn scans_unrecorded_tables(&self) -> bool {
        self.scan_unrecorded_tables
    }
}

/// Filters and scan settings of [`TransactionManager::list_transactions`].
///
/// [`TransactionManager::list_transactions`]: crate::TransactionManager::list_transactions
#[derive(Clone, Default)]
#[must_use]
pub struct ListOptions {
    pub(super) state: Option<TxState>,
    pub(super) unfinalized: bool,
    pub(super) older_than: Option<Duration>,
    pub(super) segments: Option<u32>,
    pub(super) progress: Option<ProgressFn>,
}

impl fmt::Debug for ListOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListOptions")
            .field("state", &self.state)
            .field("unfinalized", &self.unfinalized)
            .field("older_than", &self.older_than)
            .field("segments", &self.segments)
            .finish_non_exhaustive()
    }
}

impl ListOptions {
    /// Every transaction.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only transactions in this state.
    pub fn state(mut self, state: Option<TxState>) -> Self {
        self.state = state;
        self
    }

    /// Only transactions that are not finalized (pending, or decided with items still to settle).
    pub fn unfinalized(mut self, yes: bool) -> Self {
        self.unfinalized = yes;
        self
    }

    /// Only records not updated for at least this long.
    pub fn older_than(mut self, d: Option<Duration>) -> Self {
        self.older_than = d;
        self
    }

    /// Parallel scan segments (default 4).
    pub fn segments(mut self, n: u32) -> Self {
        self.segments = Some(n.max(1));
        self
    }

    /// Called after every scanned page.
    pub fn progress(mut self, f: impl Fn(&ScanProgress) + Send + Sync + 'static) -> Self {
        self.progress = Some(Arc::new(f));
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_defaults() {
        let o = SweepOptions::new().segments(0);
        assert_eq!(o.segments_count(), 1);
        assert_eq!(o.rollback_after_value(), Duration::from_secs(300));
        assert_eq!(o.delete_after_value(), None);
        assert!(!o.is_dry_run());
    }
}
