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
//! reported for an operator) and completes finalized transactions that still hold a lock. Last, it
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

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use futures::StreamExt;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::TxId;
use crate::ddb::{self, Written};
use crate::error::{Error, Item, Result};
use crate::item_lock::{self, Observed};
use crate::keys::ItemRef;
use crate::manager::TransactionManager;
use crate::record::{self, Header, TxState};
use crate::request::Op;
use crate::settle;
use crate::tables::{IMAGE_ID, TX_ID, TX_ROW};

/// A progress callback: called after every scanned page.
type ProgressFn = Arc<dyn Fn(&ScanProgress) + Send + Sync>;

/// Which scan a [`ScanProgress`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ScanPhase {
    /// TX records (header rows of the transactions table).
    Records,
    /// Before-images in the images table.
    Images,
    /// Items of a user table, looking for orphaned locks.
    Items,
}

impl fmt::Display for ScanPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ScanPhase::Records => "records",
            ScanPhase::Images => "images",
            ScanPhase::Items => "items",
        })
    }
}

/// How far a scan has got, reported to the callback of [`SweepOptions::progress`] and
/// [`ListOptions::progress`] after each page.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScanProgress {
    /// What is being scanned.
    pub phase: ScanPhase,
    /// The table being scanned.
    pub table: String,
    /// Rows handled so far in this phase (all segments together).
    pub scanned: u64,
}

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
#[derive(Clone)]
#[must_use]
pub struct SweepOptions {
    rollback_after: Duration,
    complete_after: Duration,
    delete_after: Option<Duration>,
    segments: u32,
    concurrency: usize,
    dry_run: bool,
    images: bool,
    tables_to_scan: Vec<String>,
    progress: Option<ProgressFn>,
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
            .field("progress", &self.progress.as_ref().map(|_| "callback"))
            .finish()
    }
}

impl SweepOptions {
    /// The defaults: roll back pending transactions idle for 5 minutes, complete decided ones idle
    /// for 1 minute, keep finalized records (for TTL), 4 scan segments, 8 records in flight per
    /// segment, sweep images, scan no user table.
    pub fn new() -> Self {
        Self::default()
    }

    /// The preset "finish everything now": roll back every pending transaction and complete every
    /// decided, unfinalized one, whatever its age ([`rollback_after`](Self::rollback_after) and
    /// [`complete_after`](Self::complete_after) are zero). Finalized records are kept; add
    /// `.delete_after(Some(Duration::ZERO))` to delete them too. Everything else is as in
    /// [`SweepOptions::new`] (orphaned images swept, no user table scanned).
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
    /// are decided and finalized). Scanning reads the whole table, so it is opt-in; the default is
    /// none.
    pub fn tables_to_scan<I, S>(mut self, tables: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.tables_to_scan = tables.into_iter().map(Into::into).collect();
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

    /// See [`SweepOptions::dry_run`].
    pub fn is_dry_run(&self) -> bool {
        self.dry_run
    }

    /// See [`SweepOptions::tables_to_scan`].
    pub fn scanned_tables(&self) -> &[String] {
        &self.tables_to_scan
    }
}

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
    /// User-table items looked at (only with [`SweepOptions::tables_to_scan`]).
    pub items_scanned: u64,
    /// Unapplied locks of transactions whose record is gone, released.
    pub orphan_locks_released: u64,
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
        self.orphan_locks_released += other.orphan_locks_released;
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
            + self.stale_locks_completed
    }

    /// True when nothing needs an operator: no error and no applied orphan lock.
    pub fn is_clean(&self) -> bool {
        self.errors.is_empty() && self.applied_orphans.is_empty()
    }
}

/// A running background sweeper, from [`TransactionManager::spawn_sweeper`].
///
/// Dropping the handle stops the sweeper too (at its next await point).
#[derive(Debug)]
pub struct Sweeper {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<SweepReport>,
    passes: Arc<AtomicU64>,
    last: Arc<Mutex<Option<SweepReport>>>,
}

impl Sweeper {
    /// Sweeps completed so far.
    pub fn passes(&self) -> u64 {
        self.passes.load(Ordering::SeqCst)
    }

    /// The report of the last completed sweep, if any.
    pub fn last_report(&self) -> Option<SweepReport> {
        self.last.lock().expect("sweeper report poisoned").clone()
    }

    /// Stops sweeping (interrupting a sweep in progress) and returns the totals of the completed
    /// sweeps.
    ///
    /// # Cancel safety
    /// Dropping this future still stops the sweeper; only the totals are lost.
    pub async fn stop(mut self) -> SweepReport {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        match (&mut self.task).await {
            Ok(r) => r,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => SweepReport::default(),
        }
    }
}

/// Filters and scan settings of [`TransactionManager::list_transactions`].
#[derive(Clone, Default)]
#[must_use]
pub struct ListOptions {
    state: Option<TxState>,
    unfinalized: bool,
    older_than: Option<Duration>,
    segments: Option<u32>,
    progress: Option<ProgressFn>,
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

/// A TX record's header, as listed by [`TransactionManager::list_transactions`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TxSummary {
    /// The transaction.
    pub id: TxId,
    /// Its state.
    pub state: TxState,
    /// Every item settled (locks released, images deleted).
    pub finalized: bool,
    /// Record version (1 at creation, +1 per append of requests).
    pub version: u64,
    /// Chunk rows holding requests beyond the header.
    pub chunks: u32,
    /// Creation time, epoch milliseconds (the coordinator's clock).
    pub created_ms: u64,
    /// Last update, epoch milliseconds (the coordinator's clock).
    pub updated_ms: u64,
    /// DynamoDB TTL of a finalized record, epoch seconds.
    pub expires_at_s: Option<u64>,
}

/// What a recorded request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RequestKind {
    /// `PutItem`.
    Put,
    /// `UpdateItem`.
    Update,
    /// `DeleteItem`.
    Delete,
    /// A read lock (`GetItem`).
    Read,
}

impl fmt::Display for RequestKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RequestKind::Put => "put",
            RequestKind::Update => "update",
            RequestKind::Delete => "delete",
            RequestKind::Read => "read",
        })
    }
}

/// One request of a transaction, without its attribute values.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RequestInfo {
    /// What it does.
    pub kind: RequestKind,
    /// The table.
    pub table: String,
    /// The item's key.
    pub key: Item,
    /// The update expression, if any.
    pub update_expression: Option<String>,
    /// The condition expression, if any.
    pub condition_expression: Option<String>,
}

/// The state of one item a transaction touches, as read now.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ItemStatus {
    /// The table.
    pub table: String,
    /// The item's key.
    pub key: Item,
    /// The item exists (a transient placeholder counts).
    pub exists: bool,
    /// The transaction holding a lock on it, if any (not necessarily the one inspected).
    pub locked_by: Option<TxId>,
    /// The lock holder's write is applied.
    pub applied: bool,
    /// The item is a placeholder inserted to lock an absent item.
    pub transient: bool,
    /// The before-image is in the images table.
    pub image_in_table: bool,
}

impl ItemStatus {
    /// True when `id` holds a lock on the item.
    pub fn locked_by_tx(&self, id: &TxId) -> bool {
        self.locked_by.as_ref() == Some(id)
    }
}

/// A transaction in detail: [`TransactionManager::describe_transaction`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TxDetails {
    /// The header.
    pub summary: TxSummary,
    /// Every recorded request, in order.
    pub requests: Vec<RequestInfo>,
    /// Every item the requests name, in order of first mention, as it is now.
    pub items: Vec<ItemStatus>,
}

impl TxDetails {
    /// Items still locked by this transaction.
    pub fn locked_items(&self) -> impl Iterator<Item = &ItemStatus> {
        self.items
            .iter()
            .filter(|i| i.locked_by_tx(&self.summary.id))
    }
}

/// What to scan and how.
struct ScanSpec<'a> {
    table: &'a str,
    phase: ScanPhase,
    filter: Option<String>,
    projection: Option<String>,
    names: HashMap<String, String>,
    values: HashMap<String, AttributeValue>,
    segments: u32,
    concurrency: usize,
    progress: Option<&'a ProgressFn>,
}

/// Scans `spec.table` in parallel segments, running `handle` on every item (at most
/// `spec.concurrency` at once per segment). Returns the number of items handled.
async fn parallel_scan<F, Fut>(client: &Client, spec: &ScanSpec<'_>, handle: F) -> Result<u64>
where
    F: Fn(Item) -> Fut,
    Fut: Future<Output = ()>,
{
    let seen = AtomicU64::new(0);
    let segments = spec.segments.max(1);
    let handle = &handle;
    let seen_ref = &seen;
    let segment = |s: u32| async move {
        let mut start = None;
        loop {
            let page = client
                .scan()
                .table_name(spec.table)
                .segment(s as i32)
                .total_segments(segments as i32)
                .set_filter_expression(spec.filter.clone())
                .set_projection_expression(spec.projection.clone())
                .set_expression_attribute_names(
                    (!spec.names.is_empty()).then(|| spec.names.clone()),
                )
                .set_expression_attribute_values(
                    (!spec.values.is_empty()).then(|| spec.values.clone()),
                )
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| Error::sdk("Scan", e))?;
            let items = page.items.unwrap_or_default();
            let n = items.len() as u64;
            futures::stream::iter(items)
                .for_each_concurrent(spec.concurrency.max(1), handle)
                .await;
            let total = seen_ref.fetch_add(n, Ordering::SeqCst) + n;
            if let Some(p) = spec.progress {
                p(&ScanProgress {
                    phase: spec.phase,
                    table: spec.table.to_string(),
                    scanned: total,
                });
            }
            start = page.last_evaluated_key;
            if start.is_none() {
                return Ok::<(), Error>(());
            }
        }
    };
    futures::future::try_join_all((0..segments).map(segment)).await?;
    Ok(seen.into_inner())
}

/// The scan of TX record rows (only header rows with `headers_only`), projecting only what the
/// sweeper needs (never the requests).
fn header_scan<'a>(
    table: &'a str,
    headers_only: bool,
    segments: u32,
    concurrency: usize,
    progress: Option<&'a ProgressFn>,
) -> ScanSpec<'a> {
    let attrs = [
        TX_ID,
        TX_ROW,
        record::STATE,
        record::VERSION,
        record::FINALIZED,
        record::UPDATED,
        record::CREATED,
        record::CHUNKS,
        record::EXPIRES,
    ];
    let names: HashMap<String, String> = attrs
        .iter()
        .map(|a| (format!("#{a}"), a.to_string()))
        .collect();
    ScanSpec {
        table,
        phase: ScanPhase::Records,
        filter: headers_only.then(|| format!("#{TX_ROW} = :_TxZero")),
        projection: Some(
            attrs
                .iter()
                .map(|a| format!("#{a}"))
                .collect::<Vec<_>>()
                .join(", "),
        ),
        names,
        values: if headers_only {
            HashMap::from([(":_TxZero".to_string(), AttributeValue::N("0".into()))])
        } else {
            HashMap::new()
        },
        segments,
        concurrency,
        progress,
    }
}

fn summary_of(item: &Item) -> Result<TxSummary> {
    let id = item
        .get(TX_ID)
        .and_then(|v| v.as_s().ok())
        .ok_or_else(|| Error::invariant("a TX record row has no _TxId"))?;
    let h = Header::parse(item)?;
    Ok(TxSummary {
        id: TxId(id.clone()),
        state: h.state,
        finalized: h.finalized,
        version: h.version,
        chunks: h.chunks,
        created_ms: h.created_ms,
        updated_ms: h.updated_ms,
        expires_at_s: item
            .get(record::EXPIRES)
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse().ok()),
    })
}

/// An error's description without attribute values (for logs above debug).
fn without_values(e: &Error) -> String {
    match e {
        Error::ItemLocked { table, owner, .. } => {
            format!("an item of table {table} is locked by transaction {owner}")
        }
        Error::ConditionFailed { table, .. } => {
            format!("a condition on an item of table {table} failed")
        }
        Error::DuplicateRequest { table, .. } => {
            format!("an item of table {table} is written twice")
        }
        other => other.to_string(),
    }
}

fn age_ms(now: u64, updated_ms: u64) -> u64 {
    now.saturating_sub(updated_ms)
}

fn millis(d: Duration) -> u64 {
    d.as_millis().min(u64::MAX as u128) as u64
}

/// What a user-table lock's owner turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OwnerState {
    Gone,
    Pending,
    Decided { finalized: bool },
}

/// Shared state of one sweep.
struct Pass<'a> {
    mgr: &'a TransactionManager,
    opts: &'a SweepOptions,
    now: u64,
    report: Mutex<SweepReport>,
    /// Header lookups of the image and item phases, by transaction id.
    owners: tokio::sync::Mutex<HashMap<String, OwnerState>>,
    /// Owners completed during the item phase.
    completed_owners: Mutex<Vec<String>>,
    /// Images-table ids that applied orphan locks point to: an operator needs them.
    protected_images: Mutex<std::collections::HashSet<String>>,
}

impl Pass<'_> {
    fn note(&self, f: impl FnOnce(&mut SweepReport)) {
        f(&mut self.report.lock().expect("sweep report poisoned"));
    }

    fn fail(&self, tx: Option<&TxId>, table: &str, e: &Error) {
        // Some errors carry keys or items: their values are only logged at debug.
        debug!(tx = ?tx.map(TxId::as_str), table, error = %e, "sweep: action failed");
        warn!(tx = ?tx.map(TxId::as_str), table, error = %without_values(e), "sweep: action failed");
        self.note(|r| {
            r.errors.push(SweepFailure {
                tx_id: tx.cloned(),
                table: table.to_string(),
                message: e.to_string(),
            })
        });
    }

    fn tx_table(&self) -> &str {
        &self.mgr.inner.tx_table
    }

    fn client(&self) -> &Client {
        &self.mgr.inner.client
    }

    async fn owner_state(&self, id: &str) -> Result<OwnerState> {
        if let Some(s) = self.owners.lock().await.get(id) {
            return Ok(*s);
        }
        let h = record::load_header(self.client(), self.tx_table(), &TxId(id.to_string())).await?;
        let s = match h {
            None => OwnerState::Gone,
            Some(h) if h.state == TxState::Pending => OwnerState::Pending,
            Some(h) => OwnerState::Decided {
                finalized: h.finalized,
            },
        };
        self.owners.lock().await.insert(id.to_string(), s);
        Ok(s)
    }

    /// One header row of the transactions table.
    async fn record(&self, item: Item) {
        if record::is_bookkeeping(&item) {
            return;
        }
        let row = item
            .get(TX_ROW)
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse::<u64>().ok());
        if row != Some(0) {
            return self.chunk_row(&item).await;
        }
        self.note(|r| r.records_scanned += 1);
        let s = match summary_of(&item) {
            Ok(s) => s,
            Err(e) => {
                let id = item
                    .get(TX_ID)
                    .and_then(|v| v.as_s().ok())
                    .map(|s| TxId(s.clone()));
                self.fail(id.as_ref(), self.tx_table(), &e);
                return;
            }
        };
        if let Err(e) = self.record_inner(&s).await {
            self.fail(Some(&s.id), self.tx_table(), &e);
        }
    }

    async fn record_inner(&self, s: &TxSummary) -> Result<()> {
        let age = age_ms(self.now, s.updated_ms);
        let opts = self.opts;
        let id = &s.id;
        match (s.state, s.finalized) {
            (TxState::Pending, _) => {
                if age < millis(opts.rollback_after) {
                    debug!(tx = %id, age_ms = age, "sweep: pending and recent, left alone");
                    self.note(|r| r.pending_left += 1);
                    return Ok(());
                }
                if opts.dry_run {
                    debug!(tx = %id, age_ms = age, "sweep (dry run): would roll back");
                    self.note(|r| r.rolled_back.push(id.clone()));
                    return Ok(());
                }
                self.roll_back_idle(id).await
            }
            (_, false) => {
                if age < millis(opts.complete_after) {
                    debug!(tx = %id, state = %s.state, age_ms = age, "sweep: decided and recent, left to its coordinator");
                    self.note(|r| r.decided_left += 1);
                    return Ok(());
                }
                if opts.dry_run {
                    debug!(tx = %id, state = %s.state, "sweep (dry run): would complete");
                    self.note(|r| r.completed.push(id.clone()));
                    return Ok(());
                }
                self.complete(id).await
            }
            (_, true) => match opts.delete_after {
                Some(d) if age >= millis(d) => {
                    if opts.dry_run {
                        debug!(tx = %id, "sweep (dry run): would delete the finalized record");
                        self.note(|r| r.deleted += 1);
                        return Ok(());
                    }
                    if record::delete(self.client(), self.tx_table(), id).await? {
                        debug!(tx = %id, age_ms = age, "sweep: deleted the finalized record");
                        self.note(|r| r.deleted += 1);
                    } else {
                        self.note(|r| r.finalized_kept += 1);
                    }
                    Ok(())
                }
                _ => {
                    self.note(|r| r.finalized_kept += 1);
                    Ok(())
                }
            },
        }
    }

    /// A chunk row: deleted when its header is gone (a record deleted by TTL leaves its chunk rows,
    /// which carry no TTL; an interrupted delete removes the header first and may leave them).
    async fn chunk_row(&self, item: &Item) {
        let Some(id) = item.get(TX_ID).and_then(|v| v.as_s().ok()) else {
            return;
        };
        let tx = TxId(id.clone());
        let table = self.tx_table().to_string();
        match self.owner_state(id).await {
            Ok(OwnerState::Gone) => {}
            Ok(_) => return,
            Err(e) => return self.fail(Some(&tx), &table, &e),
        }
        if !self.opts.dry_run {
            let key: Item = [TX_ID, TX_ROW]
                .iter()
                .filter_map(|k| item.get(*k).map(|v| (k.to_string(), v.clone())))
                .collect();
            if let Err(e) = ddb::batch_delete(self.client(), &table, vec![key]).await {
                return self.fail(Some(&tx), &table, &e);
            }
        }
        debug!(tx = %tx, "sweep: deleted a request row whose record header is gone");
        self.note(|r| r.orphan_chunks_deleted += 1);
    }

    /// Rolls back a pending transaction after checking, on a consistent read of the whole record,
    /// that it is still pending and idle. The rollback is decided only on what was judged idle:
    /// conditional on that version and that last-update time, so an append or a heartbeat since
    /// (a live coordinator) makes it leave the transaction alone; it never retries on a newer
    /// version it did not judge.
    async fn roll_back_idle(&self, id: &TxId) -> Result<()> {
        let Some(rec) = record::load(self.client(), self.tx_table(), id).await? else {
            debug!(tx = %id, "sweep: record vanished before rollback");
            return Ok(());
        };
        let h = &rec.header;
        if h.state != TxState::Pending {
            if !h.finalized {
                return self.complete(id).await;
            }
            return Ok(());
        }
        if age_ms(crate::ddb::now_millis(), h.updated_ms) < millis(self.opts.rollback_after) {
            debug!(tx = %id, "sweep: pending transaction moved on, left alone");
            self.note(|r| r.pending_left += 1);
            return Ok(());
        }
        let judged = h.updated_ms;
        match settle::roll_back_idle(&self.mgr.inner, id, rec, judged).await {
            Ok(true) => {
                debug!(tx = %id, "sweep: rolled back an idle pending transaction");
                self.note(|r| r.rolled_back.push(id.clone()));
                Ok(())
            }
            Ok(false) => {
                debug!(tx = %id, "sweep: pending transaction moved on before the decision, left alone");
                self.note(|r| r.pending_left += 1);
                Ok(())
            }
            Err(Error::AlreadyCommitted { .. }) => {
                debug!(tx = %id, "sweep: transaction committed meanwhile; completed it");
                self.note(|r| r.completed.push(id.clone()));
                Ok(())
            }
            Err(Error::UnknownOutcome { .. } | Error::TransactionNotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn complete(&self, id: &TxId) -> Result<()> {
        match self.mgr.complete_transaction(id).await {
            Ok(TxState::Pending) => {
                self.note(|r| r.pending_left += 1);
                Ok(())
            }
            Ok(state) => {
                debug!(tx = %id, state = %state, "sweep: completed a decided transaction");
                self.note(|r| r.completed.push(id.clone()));
                Ok(())
            }
            Err(Error::TransactionNotFound { .. } | Error::UnknownOutcome { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// One images-table entry: deleted when its transaction is finalized or gone.
    async fn image(&self, item: Item) {
        self.note(|r| r.images_scanned += 1);
        let Some(image_id) = item.get(IMAGE_ID).and_then(|v| v.as_s().ok()) else {
            return;
        };
        let Some((owner, _)) = image_id.split_once('#') else {
            debug!("sweep: images-table entry with an id not made by this library, left alone");
            return;
        };
        let table = self.mgr.inner.image_table.clone();
        let owner_id = TxId(owner.to_string());
        let state = match self.owner_state(owner).await {
            Ok(s) => s,
            Err(e) => return self.fail(Some(&owner_id), &table, &e),
        };
        if self
            .protected_images
            .lock()
            .expect("poisoned")
            .contains(image_id.as_str())
        {
            debug!(tx = %owner_id, "sweep: kept the image of an applied orphan lock");
            return;
        }
        // A pending or decided-unfinalized transaction may still need the image for a rollback.
        if !matches!(
            state,
            OwnerState::Gone | OwnerState::Decided { finalized: true }
        ) {
            return;
        }
        if !self.opts.dry_run {
            let key = HashMap::from([(IMAGE_ID.to_string(), AttributeValue::S(image_id.clone()))]);
            if let Err(e) = ddb::batch_delete(self.client(), &table, vec![key]).await {
                return self.fail(Some(&owner_id), &table, &e);
            }
        }
        debug!(tx = %owner_id, ?state, "sweep: deleted an orphaned image");
        self.note(|r| r.orphan_images_deleted += 1);
    }

    /// One locked item of a user table.
    async fn locked_item(&self, table: &str, schema: &crate::keys::KeySchema, item: Item) {
        self.note(|r| r.items_scanned += 1);
        let obs = Observed::of(Some(&item));
        let Some(owner) = obs.owner.clone() else {
            return;
        };
        let owner_id = TxId(owner.clone());
        let key = item_lock::key_of(schema, &item);
        let r = async {
            match self.owner_state(&owner).await? {
                OwnerState::Pending | OwnerState::Decided { finalized: false } => Ok(()),
                OwnerState::Decided { finalized: true } => {
                    // A lock taken late by a slow coordinator of a finished transaction.
                    {
                        let mut done = self.completed_owners.lock().expect("poisoned");
                        if done.contains(&owner) {
                            return Ok(());
                        }
                        done.push(owner.clone());
                    }
                    if !self.opts.dry_run {
                        match self.mgr.complete_transaction(&owner_id).await {
                            Ok(_)
                            | Err(Error::TransactionNotFound { .. })
                            | Err(Error::UnknownOutcome { .. }) => {}
                            Err(e) => return Err(e),
                        }
                    }
                    debug!(tx = %owner_id, table, "sweep: completed a finalized transaction that still held a lock");
                    self.note(|r| r.stale_locks_completed += 1);
                    Ok(())
                }
                OwnerState::Gone => self.orphan_lock(table, &key, &owner_id, &obs).await,
            }
        }
        .await;
        if let Err(e) = r {
            self.fail(Some(&owner_id), table, &e);
        }
    }

    /// A lock whose transaction's record is gone: released when unapplied, reported when applied.
    async fn orphan_lock(
        &self,
        table: &str,
        key: &Item,
        owner: &TxId,
        obs: &Observed,
    ) -> Result<()> {
        let report_applied = |image_id: Option<String>| {
            debug!(tx = %owner, table, key = ?key, "sweep: applied lock of a vanished transaction needs an operator");
            if let Some(i) = &image_id {
                self.protected_images
                    .lock()
                    .expect("poisoned")
                    .insert(i.clone());
            }
            self.note(|r| {
                r.applied_orphans.push(OrphanLock {
                    table: table.to_string(),
                    key: key.clone(),
                    owner: owner.clone(),
                    image_id,
                })
            });
        };
        if obs.applied {
            report_applied(obs.image_ref.clone());
            return Ok(());
        }
        if self.opts.dry_run {
            self.note(|r| r.orphan_locks_released += 1);
            return Ok(());
        }
        let w = item_lock::release_write(table, key, obs.transient, false, owner);
        match w.send(self.client(), None).await? {
            Written::Ok(_) => {
                debug!(tx = %owner, table, key = ?key, "sweep: released the lock of a vanished transaction");
                self.note(|r| r.orphan_locks_released += 1);
            }
            Written::ConditionFailed(found) => {
                let now = Observed::of(found.as_ref());
                if now.locked_by(owner) && now.applied {
                    report_applied(now.image_ref.clone());
                }
            }
        }
        Ok(())
    }
}

impl TransactionManager {
    /// Sweeps once: rolls back idle pending transactions, completes decided ones, deletes old
    /// finalized records, deletes orphaned images and (for [`SweepOptions::tables_to_scan`])
    /// releases orphaned locks. See the [module documentation](crate::sweeper).
    ///
    /// Failures on single records are collected in [`SweepReport::errors`] and the sweep goes on.
    ///
    /// ```no_run
    /// # async fn demo(m: dynamodb_transactions::TransactionManager) -> dynamodb_transactions::Result<()> {
    /// use dynamodb_transactions::sweeper::SweepOptions;
    /// let report = m.sweep(&SweepOptions::new()).await?;
    /// println!("rolled back {}, completed {}", report.rolled_back.len(), report.completed.len());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// When a scan fails (a table is missing, permissions, throttling beyond the SDK's retries).
    ///
    /// # Cancel safety
    /// Safe to drop at any point: every step is a conditional, repeatable write, and whatever a
    /// dropped sweep left half done (a rollback decided but not finished, say) the next sweep
    /// finishes.
    pub async fn sweep(&self, options: &SweepOptions) -> Result<SweepReport> {
        let span = info_span!("sweep", tx_table = %self.inner.tx_table, dry_run = options.dry_run);
        self.sweep_inner(options)
            .instrument(span)
            .await
            .inspect(crate::metrics::sweep_report)
    }

    async fn sweep_inner(&self, opts: &SweepOptions) -> Result<SweepReport> {
        let pass = Pass {
            mgr: self,
            opts,
            now: crate::ddb::now_millis(),
            report: Mutex::new(SweepReport {
                dry_run: opts.dry_run,
                ..SweepReport::default()
            }),
            owners: tokio::sync::Mutex::new(HashMap::new()),
            completed_owners: Mutex::new(Vec::new()),
            protected_images: Mutex::new(std::collections::HashSet::new()),
        };
        let client = &self.inner.client;
        let pass_ref = &pass;
        let spec = header_scan(
            &self.inner.tx_table,
            false,
            opts.segments,
            opts.concurrency,
            opts.progress.as_ref(),
        );
        parallel_scan(client, &spec, |item| pass_ref.record(item)).await?;

        for table in &opts.tables_to_scan {
            let schema = self.inner.schemas.get(client, table).await?;
            let mut names: HashMap<String, String> = HashMap::new();
            let mut projection = Vec::new();
            for (i, k) in schema.names().enumerate() {
                names.insert(format!("#k{i}"), k.to_string());
                projection.push(format!("#k{i}"));
            }
            for a in [
                item_lock::OWNER,
                item_lock::APPLIED,
                item_lock::TRANSIENT,
                item_lock::IMAGE_REF,
            ] {
                names.insert(format!("#{a}"), a.to_string());
                projection.push(format!("#{a}"));
            }
            let spec = ScanSpec {
                table,
                phase: ScanPhase::Items,
                filter: Some(format!("attribute_exists(#{})", item_lock::OWNER)),
                projection: Some(projection.join(", ")),
                names,
                values: HashMap::new(),
                segments: opts.segments,
                concurrency: opts.concurrency,
                progress: opts.progress.as_ref(),
            };
            let schema = &*schema;
            parallel_scan(client, &spec, |item| {
                pass_ref.locked_item(table, schema, item)
            })
            .await?;
        }

        // After the item scans, so that images that applied orphan locks point to are kept.
        if opts.images {
            let spec = ScanSpec {
                table: &self.inner.image_table,
                phase: ScanPhase::Images,
                filter: None,
                projection: Some(format!("#{IMAGE_ID}")),
                names: HashMap::from([(format!("#{IMAGE_ID}"), IMAGE_ID.to_string())]),
                values: HashMap::new(),
                segments: opts.segments,
                concurrency: opts.concurrency,
                progress: opts.progress.as_ref(),
            };
            parallel_scan(client, &spec, |item| pass_ref.image(item)).await?;
        }

        let report = pass.report.into_inner().expect("sweep report poisoned");
        info!(
            dry_run = report.dry_run,
            records = report.records_scanned,
            rolled_back = report.rolled_back.len(),
            completed = report.completed.len(),
            deleted = report.deleted,
            chunks_deleted = report.orphan_chunks_deleted,
            pending_left = report.pending_left,
            images_deleted = report.orphan_images_deleted,
            locks_released = report.orphan_locks_released,
            stale_locks_completed = report.stale_locks_completed,
            applied_orphans = report.applied_orphans.len(),
            errors = report.errors.len(),
            "sweep finished"
        );
        Ok(report)
    }

    /// Sweeps every `interval` (measured from the start of one sweep to the start of the next)
    /// until `shutdown` resolves, calling `on_pass` with each sweep's outcome. A failed sweep is
    /// logged and retried at the next interval. Returns the totals of the completed sweeps.
    ///
    /// ```no_run
    /// # async fn demo(m: dynamodb_transactions::TransactionManager) {
    /// use std::time::Duration;
    /// use dynamodb_transactions::sweeper::SweepOptions;
    /// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    /// # drop(stop);
    /// let totals = m
    ///     .sweep_every(Duration::from_secs(60), &SweepOptions::new(), async { let _ = stopped.await; }, |_| {})
    ///     .await;
    /// # let _ = totals;
    /// # }
    /// ```
    ///
    /// # Cancel safety
    /// Safe to drop at any point, like [`TransactionManager::sweep`]; `shutdown` resolving
    /// interrupts a sweep in progress the same way.
    pub async fn sweep_every<S, F>(
        &self,
        interval: Duration,
        options: &SweepOptions,
        shutdown: S,
        mut on_pass: F,
    ) -> SweepReport
    where
        S: Future<Output = ()>,
        F: FnMut(&Result<SweepReport>),
    {
        let mut shutdown = std::pin::pin!(shutdown);
        let mut total = SweepReport {
            dry_run: options.dry_run,
            ..SweepReport::default()
        };
        loop {
            let started = tokio::time::Instant::now();
            let outcome = tokio::select! {
                biased;
                _ = &mut shutdown => break,
                r = self.sweep(options) => r,
            };
            if let Err(e) = &outcome {
                warn!(error = %e, "sweep failed; trying again at the next interval");
            }
            on_pass(&outcome);
            if let Ok(r) = outcome {
                total.merge(r);
            }
            tokio::select! {
                biased;
                _ = &mut shutdown => break,
                _ = tokio::time::sleep_until(started + interval) => {}
            }
        }
        total
    }

    /// Spawns [`TransactionManager::sweep_every`] on the Tokio runtime; stop it with
    /// [`Sweeper::stop`] (or by dropping the handle).
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    pub fn spawn_sweeper(&self, interval: Duration, options: SweepOptions) -> Sweeper {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let passes = Arc::new(AtomicU64::new(0));
        let last = Arc::new(Mutex::new(None));
        let mgr = self.clone();
        let (p, l) = (passes.clone(), last.clone());
        let task = tokio::spawn(async move {
            mgr.sweep_every(
                interval,
                &options,
                async {
                    let _ = stopped.await;
                },
                move |r| {
                    p.fetch_add(1, Ordering::SeqCst);
                    if let Ok(r) = r {
                        *l.lock().expect("sweeper report poisoned") = Some(r.clone());
                    }
                },
            )
            .await
        });
        Sweeper {
            stop: Some(stop),
            task,
            passes,
            last,
        }
    }
}

impl TransactionManager {
    /// Lists TX records (header rows only, by a parallel scan), most recently updated first.
    ///
    /// # Cancel safety
    /// Read-only; safe to drop.
    pub async fn list_transactions(&self, options: &ListOptions) -> Result<Vec<TxSummary>> {
        let now = crate::ddb::now_millis();
        let out: Mutex<Vec<TxSummary>> = Mutex::new(Vec::new());
        let bad: Mutex<Option<Error>> = Mutex::new(None);
        let spec = header_scan(
            &self.inner.tx_table,
            true,
            options.segments.unwrap_or(4),
            1,
            options.progress.as_ref(),
        );
        let (out_ref, bad_ref) = (&out, &bad);
        parallel_scan(&self.inner.client, &spec, |item| async move {
            if record::is_bookkeeping(&item) {
                return;
            }
            match summary_of(&item) {
                Ok(s) => {
                    let keep = options.state.is_none_or(|st| st == s.state)
                        && (!options.unfinalized || !s.finalized)
                        && options
                            .older_than
                            .is_none_or(|d| age_ms(now, s.updated_ms) >= millis(d));
                    if keep {
                        out_ref.lock().expect("poisoned").push(s);
                    }
                }
                Err(e) => {
                    bad_ref.lock().expect("poisoned").get_or_insert(e);
                }
            }
        })
        .await?;
        if let Some(e) = bad.into_inner().expect("poisoned") {
            return Err(e);
        }
        let mut v = out.into_inner().expect("poisoned");
        v.sort_by(|a, b| b.updated_ms.cmp(&a.updated_ms).then(a.id.cmp(&b.id)));
        Ok(v)
    }

    /// Reads a transaction's record and the current state of every item it names (consistent
    /// reads). `None` if the record does not exist.
    ///
    /// # Cancel safety
    /// Read-only; safe to drop.
    pub async fn describe_transaction(&self, id: &TxId) -> Result<Option<TxDetails>> {
        let c = &self.inner.client;
        let Some(rec) = record::load(c, &self.inner.tx_table, id).await? else {
            return Ok(None);
        };
        let h = &rec.header;
        let expires_at_s = client_expiry(c, &self.inner.tx_table, id).await?;
        let summary = TxSummary {
            id: id.clone(),
            state: h.state,
            finalized: h.finalized,
            version: h.version,
            chunks: h.chunks,
            created_ms: h.created_ms,
            updated_ms: h.updated_ms,
            expires_at_s,
        };
        let requests: Vec<RequestInfo> = rec
            .requests
            .iter()
            .map(|r| RequestInfo {
                kind: match r.op {
                    Op::Put => RequestKind::Put,
                    Op::Update => RequestKind::Update,
                    Op::Delete => RequestKind::Delete,
                    Op::Get => RequestKind::Read,
                },
                table: r.table.clone(),
                key: r.key.clone(),
                update_expression: r.update.clone(),
                condition_expression: r.condition.clone(),
            })
            .collect();
        // Distinct items in order of first mention.
        let mut order: Vec<(ItemRef, String, Item)> = Vec::new();
        for r in &rec.requests {
            let k = r.item_ref();
            if !order.iter().any(|(o, _, _)| *o == k) {
                order.push((k, r.table.clone(), r.key.clone()));
            }
        }
        let keys: Vec<(String, Item)> = order
            .iter()
            .map(|(_, t, k)| (t.clone(), k.clone()))
            .collect();
        let mut found: BTreeMap<ItemRef, Item> = BTreeMap::new();
        for (table, item) in ddb::batch_get(c, &keys).await? {
            let schema = self.inner.schemas.get(c, &table).await?;
            let key = item_lock::key_of(&schema, &item);
            found.insert(ItemRef::new(&table, &key), item);
        }
        let items = order
            .into_iter()
            .map(|(r, table, key)| {
                let obs = Observed::of(found.get(&r));
                ItemStatus {
                    table,
                    key,
                    exists: obs.exists,
                    locked_by: obs.owner.clone().map(TxId),
                    applied: obs.applied,
                    transient: obs.transient,
                    image_in_table: obs.image_ref.is_some(),
                }
            })
            .collect();
        Ok(Some(TxDetails {
            summary,
            requests,
            items,
        }))
    }
}

/// The TTL attribute of a record's header (not part of the parsed header).
async fn client_expiry(client: &Client, table: &str, id: &TxId) -> Result<Option<u64>> {
    let out = client
        .get_item()
        .table_name(table)
        .set_key(Some(record::header_key(id)))
        .projection_expression("#e")
        .expression_attribute_names("#e", record::EXPIRES)
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| Error::sdk("GetItem", e))?;
    Ok(out
        .item
        .and_then(|i| i.get(record::EXPIRES).and_then(|v| v.as_n().ok()).cloned())
        .and_then(|n| n.parse().ok()))
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

    #[test]
    fn options_defaults() {
        let o = SweepOptions::new().segments(0);
        assert_eq!(o.segments_count(), 1);
        assert_eq!(o.rollback_after_value(), Duration::from_secs(300));
        assert_eq!(o.delete_after_value(), None);
        assert!(!o.is_dry_run());
    }
}
