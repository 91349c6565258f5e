//! What a sweep did: [`SweepReport`], with the [`SweepFailure`]s and [`OrphanLock`]s it found.

use std::fmt;

use crate::TxId;
use crate::error::Item;

/// An item locked by a transaction whose record is gone, with its write applied: the sweeper cannot
/// tell whether that write committed, so an operator must decide (restore the item from its
/// before-image `_TxG` / images table, or keep it, then remove the `_Tx*` attributes).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct OrphanLock {
    /// The user table.
    pub table: String,
    /// The item's key.
    pub key: Item,
    /// The transaction that holds the lock.
    pub owner: TxId,
    /// The images-table id of the before-image, when it is not embedded in the item (`_TxG`). The
    /// sweeper keeps that image.
    pub image_id: Option<String>,
}

/// The slices of the tables listed as holding locks without record that one sweep pass read
/// ([`SweepOptions::unrecorded_scan_period`](super::SweepOptions::unrecorded_scan_period)):
/// `count` consecutive slices of `of`, from `first`, wrapping round after slice `of - 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SlicesRead {
    /// The first slice read (0-based).
    pub first: u32,
    /// How many were read: 0 when none came due since the last pass, or another sweeper claimed
    /// them; `of` when the tables were read whole.
    pub count: u32,
    /// How many slices a table is cut in
    /// ([`SweepOptions::unrecorded_table_slices`](super::SweepOptions::unrecorded_table_slices)).
    pub of: u32,
}

impl SlicesRead {
    /// The table whole: its one slice of one.
    pub(crate) const WHOLE: SlicesRead = SlicesRead {
        first: 0,
        count: 1,
        of: 1,
    };

    /// The same run, with no slice in it (another sweeper claimed them).
    pub(crate) fn none(self) -> SlicesRead {
        SlicesRead { count: 0, ..self }
    }

    /// The slices read, in order.
    ///
    /// ```
    /// # use dynamodb_transactions::sweeper::SweepReport;
    /// # fn show(report: &SweepReport) {
    /// if let Some(read) = report.unrecorded_slices {
    ///     println!("slices {:?} of {}", read.indexes().collect::<Vec<_>>(), read.of);
    /// }
    /// # }
    /// ```
    pub fn indexes(&self) -> impl Iterator<Item = u32> + use<> {
        let (first, of) = (self.first, self.of.max(1));
        (0..self.count).map(move |j| (first + j) % of)
    }
}

/// Something the sweeper could not do; the next sweep tries again.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SweepFailure {
    /// The transaction concerned, if any.
    pub tx_id: Option<TxId>,
    /// The table concerned.
    pub table: String,
    /// What failed.
    pub message: String,
}

impl fmt::Display for SweepFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.tx_id {
            Some(id) => write!(f, "transaction {id} ({}): {}", self.table, self.message),
            None => write!(f, "{}: {}", self.table, self.message),
        }
    }
}

/// What a sweep did (or, in a dry run, would do).
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct SweepReport {
    /// True when nothing was written.
    pub dry_run: bool,
    /// TX records looked at.
    pub records_scanned: u64,
    /// Pending transactions rolled back (idle longer than `rollback_after`).
    pub rolled_back: Vec<TxId>,
    /// Decided transactions driven to completion (items settled, record finalized).
    pub completed: Vec<TxId>,
    /// Finalized records deleted.
    pub deleted: u64,
    /// Request rows (`_TxN > 0`) of records whose header is gone (deleted by TTL), deleted.
    pub orphan_chunks_deleted: u64,
    /// Pending transactions left alone because they are recent.
    pub pending_left: u64,
    /// Decided, unfinalized transactions left to their coordinator because they are recent.
    pub decided_left: u64,
    /// Finalized records kept (no `delete_after`, or not old enough).
    pub finalized_kept: u64,
    /// Images-table entries looked at.
    pub images_scanned: u64,
    /// Images deleted because their transaction is finalized or gone.
    pub orphan_images_deleted: u64,
    /// Locked items found in the user tables of [`SweepOptions::tables_to_scan`] (0 without
    /// them). Only locked items count: the scan asks DynamoDB for items carrying a lock (or a
    /// waiter's mark, which does not count here), so a table of 1,000 items with one lock counts 1.
    ///
    /// [`SweepOptions::tables_to_scan`]: super::SweepOptions::tables_to_scan
    pub items_scanned: u64,
    /// The slices of the listed tables this pass scanned for locks without record, when it read
    /// them by [`SweepOptions::unrecorded_scan_period`] and a table is listed (`None` otherwise:
    /// every listed table was read whole, as with a zero period or in a dry run, or none is
    /// listed). After [`merge`](Self::merge), the last pass's.
    ///
    /// [`SweepOptions::unrecorded_scan_period`]: super::SweepOptions::unrecorded_scan_period
    pub unrecorded_slices: Option<SlicesRead>,
    /// The tables listed as holding locks without record that this pass read for those locks
    /// (whole, or their [`unrecorded_slices`](Self::unrecorded_slices); none when no slice came
    /// due), sorted; a listed table also in
    /// [`SweepOptions::tables_to_scan`](super::SweepOptions::tables_to_scan) is read whole
    /// there and not named here. After [`merge`](Self::merge), every table any pass read.
    pub unrecorded_tables: Vec<String>,
    /// Unapplied locks of transactions whose record is gone, released.
    pub orphan_locks_released: u64,
    /// Waiters' marks (`_TxH`, [`Settings::mark_oldest_waiter`]) and entries of the line behind
    /// them (`_TxHL`) taken off items of [`SweepOptions::tables_to_scan`]: marks and entries
    /// that no longer count, or were written [`SweepOptions::rollback_after`] ago, left by
    /// waiters that died on items no lock has taken since.
    ///
    /// [`Settings::mark_oldest_waiter`]: crate::Settings::mark_oldest_waiter
    /// [`SweepOptions::tables_to_scan`]: super::SweepOptions::tables_to_scan
    /// [`SweepOptions::rollback_after`]: super::SweepOptions::rollback_after
    pub marks_removed: u64,
    /// Expired entries of waiters' queues (`_TxQ`, [`Settings::wait_in_ticket_order`]) taken off
    /// unlocked items of [`SweepOptions::tables_to_scan`]: left by waiters that died or gave up
    /// on items nobody has locked since. They no longer count once expired; this takes their
    /// attributes off.
    ///
    /// [`Settings::wait_in_ticket_order`]: crate::Settings::wait_in_ticket_order
    /// [`SweepOptions::tables_to_scan`]: super::SweepOptions::tables_to_scan
    pub queue_entries_removed: u64,
    /// Locks of decided transactions found on items, whose transaction was completed.
    pub stale_locks_completed: u64,
    /// Applied locks of transactions whose record is gone: they need an operator.
    pub applied_orphans: Vec<OrphanLock>,
    /// What failed; the next sweep tries again.
    pub errors: Vec<SweepFailure>,
}

impl SweepReport {
    /// Adds another report's counts and lists to this one (for totals over many passes).
    pub fn merge(&mut self, other: SweepReport) {
        self.dry_run |= other.dry_run;
        self.records_scanned += other.records_scanned;
        self.rolled_back.extend(other.rolled_back);
        self.completed.extend(other.completed);
        self.deleted += other.deleted;
        self.orphan_chunks_deleted += other.orphan_chunks_deleted;
        self.pending_left += other.pending_left;
        self.decided_left += other.decided_left;
        self.finalized_kept += other.finalized_kept;
        self.images_scanned += other.images_scanned;
        self.orphan_images_deleted += other.orphan_images_deleted;
        self.items_scanned += other.items_scanned;
        // The last pass's slices.
        self.unrecorded_slices = other.unrecorded_slices.or(self.unrecorded_slices);
        for t in other.unrecorded_tables {
            if let Err(at) = self.unrecorded_tables.binary_search(&t) {
                self.unrecorded_tables.insert(at, t);
            }
        }
        self.orphan_locks_released += other.orphan_locks_released;
        self.marks_removed += other.marks_removed;
        self.queue_entries_removed += other.queue_entries_removed;
        self.stale_locks_completed += other.stale_locks_completed;
        self.applied_orphans.extend(other.applied_orphans);
        self.errors.extend(other.errors);
    }

    /// How many changes were made (or would be, in a dry run).
    pub fn actions(&self) -> u64 {
        self.rolled_back.len() as u64
            + self.completed.len() as u64
            + self.deleted
            + self.orphan_chunks_deleted
            + self.orphan_images_deleted
            + self.orphan_locks_released
            + self.marks_removed
            + self.queue_entries_removed
            + self.stale_locks_completed
    }

    /// True when nothing needs an operator: no error and no applied orphan lock.
    pub fn is_clean(&self) -> bool {
        self.errors.is_empty() && self.applied_orphans.is_empty()
    }

    /// Counts this sweep's actions in the sweeper-actions metric (nothing for a dry run).
    pub(crate) fn count_in_metrics(&self) {
        if self.dry_run {
            return;
        }
        let actions = [
            ("rolled_back", self.rolled_back.len() as u64),
            ("completed", self.completed.len() as u64),
            ("deleted", self.deleted),
            ("orphan_chunks_deleted", self.orphan_chunks_deleted),
            ("orphan_images_deleted", self.orphan_images_deleted),
            ("marks_removed", self.marks_removed),
            ("queue_entries_removed", self.queue_entries_removed),
            ("stale_locks_completed", self.stale_locks_completed),
        ];
        for (action, n) in actions {
            crate::metrics::sweeper_actions(action, n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_merge_adds_up() {
        let mut a = SweepReport {
            records_scanned: 2,
            rolled_back: vec![TxId::from("a")],
            deleted: 1,
            ..SweepReport::default()
        };
        let b = SweepReport {
            records_scanned: 3,
            completed: vec![TxId::from("b")],
            orphan_images_deleted: 2,
            ..SweepReport::default()
        };
        a.merge(b);
        assert_eq!(a.records_scanned, 5);
        assert_eq!(a.actions(), 5);
        assert!(a.is_clean());
    }
}
