//! One sweep: what it does with each TX record, request row, image and locked item.

use std::collections::HashMap;
use std::sync::Mutex;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use tracing::{debug, info, warn};

use super::inspect::{TxSummary, summary_of};
use super::options::SweepOptions;
use super::report::{OrphanLock, SlicesRead, SweepFailure, SweepReport};
use super::scan::{ScanPhase, ScanSpec, header_scan, parallel_scan};
use super::{age_ms, millis};
use crate::TxId;
use crate::ddb::{self, Written};
use crate::error::{Error, Item, Result};
use crate::item_lock::{self, Observed};
use crate::manager::TransactionManager;
use crate::record::{self, TxState};
use crate::settle;
use crate::tables::{IMAGE_ID, TX_ID, TX_ROW};

mod marks;

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
            (_, true) if s.tombstone => self.tombstone(s, age).await,
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

    /// A tombstone: deleted like a finalized record, but never before its time (a creation of its
    /// transaction's record may be on its way until then: the delete is conditional on it).
    async fn tombstone(&self, s: &TxSummary, age: u64) -> Result<()> {
        let due = match self.opts.delete_after {
            Some(d) => age >= millis(d),
            None => false,
        };
        if !due {
            self.note(|r| r.finalized_kept += 1);
            return Ok(());
        }
        if self.opts.dry_run {
            self.note(|r| r.deleted += 1);
            return Ok(());
        }
        if record::delete_tombstone(self.client(), self.tx_table(), &s.id, self.now).await? {
            debug!(tx = %s.id, "sweep: deleted a tombstone");
            self.note(|r| r.deleted += 1);
        } else {
            self.note(|r| r.finalized_kept += 1);
        }
        Ok(())
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

    /// One item of a user table the scan returned: locked, or carrying a waiter's mark or queue
    /// (or several of these).
    async fn locked_item(&self, table: &str, schema: &crate::keys::KeySchema, item: Item) {
        let key = item_lock::key_of(schema, &item);
        if let Some(mark) = item_lock::head::HeadMark::of(&item) {
            self.mark(table, &key, mark).await;
        }
        if let Some(seen) = item.get(item_lock::line::LINE) {
            self.line(table, &key, seen, item_lock::line::Line::of(&item))
                .await;
        }
        let obs = Observed::of(Some(&item));
        let Some(owner) = obs.owner.clone() else {
            self.queue(table, &key, &item).await;
            return;
        };
        self.note(|r| r.items_scanned += 1);
        let owner_id = TxId(owner.clone());
        let r = async {
            match self.owner_state(&owner).await? {
                OwnerState::Pending | OwnerState::Decided { finalized: false } => Ok(()),
                OwnerState::Decided { finalized: true } => {
                    // A lock taken late by a slow coordinator of a finished transaction, or a
                    // read's lock its record never named (`Settings::locked_reads`).
                    let first = {
                        let mut done = self.completed_owners.lock().expect("poisoned");
                        let first = !done.contains(&owner);
                        if first {
                            done.push(owner.clone());
                        }
                        first
                    };
                    if self.opts.dry_run {
                        if first {
                            self.note(|r| r.stale_locks_completed += 1);
                        }
                        return Ok(());
                    }
                    if first {
                        match self.mgr.complete_transaction(&owner_id).await {
                            Ok(_)
                            | Err(Error::TransactionNotFound { .. })
                            | Err(Error::UnknownOutcome { .. }) => {}
                            Err(e) => return Err(e),
                        }
                        debug!(tx = %owner_id, table, "sweep: completed a finalized transaction that still held a lock");
                        self.note(|r| r.stale_locks_completed += 1);
                    }
                    // Completion settles the items the record names; a lock still on this item
                    // is one it does not name, never applied: released as the decided
                    // transaction's.
                    crate::contention::steal_orphan(&self.mgr.inner, &owner_id, table, &key, true, None)
                        .await
                }
                // A lock taken without a record, by a transaction that may still run and create
                // its record or commit without one: left to it (and to its contenders, who judge
                // it by its lock) until it is `rollback_after` old, as a pending record is.
                OwnerState::Gone if obs.ticket.is_some() && !obs.applied && self.young(&obs) => {
                    debug!(tx = %owner_id, table, "sweep: left a recent lock taken without a record");
                    self.note(|r| r.pending_left += 1);
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

    /// The lock was taken less than `rollback_after` ago (by its stamp).
    fn young(&self, obs: &Observed) -> bool {
        let locked = obs.locked_ms().unwrap_or(0);
        age_ms(crate::ddb::now_millis(), locked) < millis(self.opts.rollback_after)
    }

    /// Scans `table` for locked items (only those locked without a record, with
    /// `unrecorded_only`, in its `slices`) and handles each
    /// ([`Self::locked_item`]).
    async fn scan_items(
        &self,
        table: &str,
        unrecorded_only: bool,
        slices: SlicesRead,
    ) -> Result<()> {
        let client = self.client();
        let schema = self.mgr.inner.schemas.get(client, table).await?;
        let mut names: HashMap<String, String> = HashMap::new();
        let mut projection = Vec::new();
        for (i, k) in schema.names().enumerate() {
            names.insert(format!("#k{i}"), k.to_string());
            projection.push(format!("#k{i}"));
        }
        for a in item_lock::queue::QUEUE_ATTRS.into_iter().chain([
            item_lock::head::HEAD,
            item_lock::line::LINE,
            item_lock::OWNER,
            item_lock::APPLIED,
            item_lock::TRANSIENT,
            item_lock::IMAGE_REF,
            item_lock::LOCK_DATE,
            item_lock::TICKET,
        ]) {
            names.insert(format!("#{a}"), a.to_string());
            projection.push(format!("#{a}"));
        }
        let marker = if unrecorded_only {
            item_lock::TICKET
        } else {
            item_lock::OWNER
        };
        let spec = ScanSpec {
            table,
            phase: ScanPhase::Items,
            // The tables named are also where waiters' marks and queues are looked for.
            filter: Some(if unrecorded_only {
                format!("attribute_exists(#{marker})")
            } else {
                format!(
                    "attribute_exists(#{marker}) OR attribute_exists(#{}) OR attribute_exists(#{}) OR attribute_exists(#{})",
                    item_lock::head::HEAD,
                    item_lock::line::LINE,
                    item_lock::queue::QUEUE
                )
            }),
            projection: Some(projection.join(", ")),
            names,
            values: HashMap::new(),
            segments: self.opts.segments,
            slices,
            concurrency: self.opts.concurrency,
            progress: self.opts.progress.as_ref(),
        };
        let schema = &*schema;
        parallel_scan(client, &spec, |item| self.locked_item(table, schema, item)).await?;
        Ok(())
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
        // The record may still be on its way (a read's lock is sent with its creation): decide
        // the transaction with a tombstone before its lock goes.
        use crate::contention::AbsentOwner;
        let found = crate::contention::decide_absent(&self.mgr.inner, owner, None).await?;
        if found == AbsentOwner::Undecided {
            debug!(tx = %owner, table, "sweep: the record of a lock's owner appeared; left to its coordinator");
            return Ok(());
        }
        let w = crate::contention::orphan_release_write(
            &self.mgr.inner,
            table,
            key,
            obs,
            owner,
            found == AbsentOwner::Tombstoned,
        );
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
    pub(super) async fn sweep_inner(&self, opts: &SweepOptions) -> Result<SweepReport> {
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

        // The tables named, whole; then the other tables where locks were taken without a
        // record, for those locks only (a table listed but gone since is reported, not fatal).
        let mut tables: Vec<(String, bool)> = opts
            .tables_to_scan
            .iter()
            .map(|t| (t.clone(), false))
            .collect();
        let mut listed = record::unrecorded_tables::Listed::default();
        if opts.scan_unrecorded_tables {
            listed = record::unrecorded_tables::listed(client, &self.inner.tx_table).await?;
            for t in &listed.tables {
                if !opts.tables_to_scan.contains(t) {
                    tables.push((t.clone(), true));
                }
            }
        }
        // Paced, the listed tables' slices that came due since the last pass of any sweeper,
        // claimed first; whole with a zero period, and in a dry run (which writes nothing, so
        // claims nothing).
        let mut slices = SlicesRead::WHOLE;
        let period = millis(opts.unrecorded_period);
        if period > 0 && !opts.dry_run && tables.iter().any(|(_, unrecorded_only)| *unrecorded_only)
        {
            let due = record::unrecorded_tables::due(
                listed.read_up_to,
                pass.now,
                period,
                opts.unrecorded_slices,
            );
            let claimed = due.count > 0
                && record::unrecorded_tables::claim(
                    client,
                    &self.inner.tx_table,
                    listed.read_up_to,
                    pass.now,
                )
                .await?;
            slices = if claimed { due } else { due.none() };
            pass.note(|r| r.unrecorded_slices = Some(slices));
        }
        for (table, unrecorded_only) in &tables {
            let slices = if *unrecorded_only {
                slices
            } else {
                SlicesRead::WHOLE
            };
            if slices.count == 0 {
                continue;
            }
            match pass.scan_items(table, *unrecorded_only, slices).await {
                Err(e) if *unrecorded_only => pass.fail(None, table, &e),
                Ok(()) if *unrecorded_only => {
                    pass.note(|r| r.unrecorded_tables.push(table.clone()));
                }
                r => r?,
            }
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
                slices: SlicesRead::WHOLE,
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
            marks_removed = report.marks_removed,
            queue_entries_removed = report.queue_entries_removed,
            stale_locks_completed = report.stale_locks_completed,
            applied_orphans = report.applied_orphans.len(),
            errors = report.errors.len(),
            "sweep finished"
        );
        Ok(report)
    }
}
