//! The phased commit, for transactions too large for one request: apply every write (batches
//! conditional on the record being pending), flip the record conditional on its version, then
//! settle.

use futures::StreamExt;
use tracing::{debug, instrument};

use crate::ddb::{self, Transacted, Write};
use crate::error::{Error, Result};
use crate::expr;
use crate::item_lock::{self, ImagePlace, Stage};
use crate::keys::ItemRef;
use crate::record::{self, Flipped, TxState};
use crate::request::{self, Op, Request};
use crate::settle::{Entry, group_by_owner, group_with_owners};

use super::commit::is_rejection;
use super::{CommitStep, State, Transaction};

/// Whether the write of `e` is rolled forward past the commit point (`Settings::roll_forward`):
/// its lock carries `_TxU` naming it, and DynamoDB is known to take it — a put or a delete, or an
/// update whose result is computed here from the item read under the lock; without a condition,
/// or with one that holds on the item as locked: one that only asks the item (`hash_key`) to be
/// absent, on the placeholder our lock inserted, or (`judge`: `Settings::judge_conditions`) any
/// condition judged here on the item read under the lock, or on the empty item a placeholder
/// stands for. Nothing can change the item while the lock stands. Any other write is applied
/// before the commit, where DynamoDB may still refuse it.
fn rolls_forward(e: &Entry, requests: &[Request], hash_key: &str, judge: bool) -> bool {
    let Some(lock) = &e.lock else {
        return false;
    };
    let Some(w) = lock.roll.filter(|w| !lock.applied && e.write == Some(*w)) else {
        return false;
    };
    let req = &requests[w];
    // The item as read under the lock, with its key (a placeholder's: the key alone).
    let mut locked = lock.before.clone().unwrap_or_default();
    locked.extend(req.key.clone());
    if let Some(c) = &req.condition {
        let Ok(cond) = expr::parse_condition(c, req.names.as_ref(), req.values.as_ref()) else {
            return false;
        };
        let holds = if lock.transient {
            // The absent item the placeholder stands for: DynamoDB judges a condition on an item
            // that does not exist against no attributes at all.
            matches!(req.op, Op::Put | Op::Update)
                && (judge || cond.requires_absent(hash_key))
                && cond.eval(&Default::default())
        } else {
            // The item as read under the lock (a lock not read yet is read before the apply).
            judge && !lock.image_unread && lock.before.is_some() && cond.eval(&locked)
        };
        if !holds {
            return false;
        }
    }
    // An update's result depends on the item read under the lock; a put's or delete's does not.
    if req.op == Op::Update && lock.image_unread {
        return false;
    }
    match req.result_on(locked) {
        Ok(_) => true,
        Err(why) => {
            debug!(table = %req.table, why, "write applied before the commit");
            false
        }
    }
}

/// How a round of `batches` concurrent batches checks the record: with a gate each when there
/// are several and the record has gates (up to the gates at once), else with the header's check,
/// one batch at a time when there are several.
pub(super) fn batch_gates(
    batches: usize,
    gated: bool,
    settings: &crate::Settings,
) -> (Option<record::Gates>, usize) {
    match batches {
        0 | 1 => (None, 1),
        _ if gated => (
            Some(record::Gates::new()),
            settings.concurrency.clamp(1, record::Gates::capacity()),
        ),
        _ => (None, 1),
    }
}

pub(super) type AppliedGroup = (Vec<Write>, Vec<Option<ItemRef>>, Result<Transacted>);

impl Transaction {
    /// Whether this handle rolls the write of `e` forward: [`Settings::roll_forward`] and
    /// [`rolls_forward`]. (Unknown key schema: no.)
    ///
    /// [`Settings::roll_forward`]: crate::Settings::roll_forward
    pub(super) async fn rolls_forward(&self, e: &Entry, requests: &[Request]) -> bool {
        if !self.inner.settings.roll_forward || e.lock.as_ref().is_none_or(|l| l.roll.is_none()) {
            return false;
        }
        match self.schema(&e.table).await {
            Ok(schema) => rolls_forward(
                e,
                requests,
                &schema.hash.0,
                self.inner.settings.judge_conditions,
            ),
            Err(_) => false,
        }
    }

    /// Commits in phases: apply every write (batches conditional on the record being pending), flip
    /// the record, unlock every item, finalize.
    #[instrument(level = "debug", name = "commit_phased", skip_all, fields(tx = %self.id, items = st.items.len()))]
    pub(super) async fn commit_phased(&self, st: &mut State) -> Result<CommitStep> {
        let _timer = crate::metrics::PhaseTimer::start(crate::metrics::COMMIT);
        let meta = st.meta.expect("flushed");
        // The apply embeds the before-images: read those a batch did not.
        if !self.ensure_images(st).await {
            return Ok(CommitStep::Again);
        }
        // 1. Apply.
        let mut writes = Vec::new();
        let mut owners = Vec::new();
        let keys: Vec<ItemRef> = st.items.keys().cloned().collect();
        for k in &keys {
            let e = st.items[k].clone();
            let lock = e
                .lock
                .clone()
                .ok_or_else(|| Error::invariant("applying to an unlocked item"))?;
            // Applied already, or applied after the commit in the write that unlocks.
            if lock.applied || self.rolls_forward(&e, &st.requests).await {
                continue;
            }
            let req = e.request(&st.requests).clone();
            let schema = self.schema(&req.table).await?;
            let place = self.image_place(&lock, &req).await?;
            if let ImagePlace::Table(id) = &place {
                st.held_mut(k).image_ref = Some(id.clone());
            }
            for w in item_lock::request_writes(&req, &lock, &schema, &self.id, Stage::Apply, &place)
            {
                writes.push(w);
                owners.push(Some(k.clone()));
            }
        }
        let c = &self.inner.client;
        let groups = if st.isolate_rejections {
            group_by_owner(writes, owners)
        } else {
            group_with_owners(writes, owners, 1)
        };
        // Concurrent batches check a gate each instead of the header, which they would all touch
        // (DynamoDB cancels a transaction whose item another one in flight touches); a record
        // without gates takes its batches one at a time.
        let (gates, in_flight) = batch_gates(groups.len(), meta.gated, &self.inner.settings);
        let gates = gates.as_ref();
        let results: Vec<AppliedGroup> = futures::stream::iter(groups)
            .map(|(ws, os)| async move {
                let gate = gates.and_then(record::Gates::take);
                let check = match &gate {
                    Some(g) => g.pending_check(&self.inner.tx_table, &self.id),
                    None => record::pending_check(&self.inner.tx_table, &self.id),
                };
                let mut batch = vec![check];
                batch.extend(ws);
                let out = ddb::transact(c, &batch).await;
                (batch, os, out)
            })
            .buffer_unordered(in_flight)
            .collect()
            .await;
        let mut again = false;
        // The first failure of the record's check (or of a gate's) that is not transient: acted
        // on once every batch's outcome is taken in, so that the batches that landed count.
        let mut check_failed: Option<ddb::Reason> = None;
        for r in results {
            let (batch, os, out) = r;
            let out = match out {
                Ok(o) => o,
                Err(e) if is_rejection(&e) => {
                    let owners: Vec<&ItemRef> = os.iter().flatten().collect();
                    if owners.len() > 1 || owners.windows(2).any(|w| w[0] != w[1]) {
                        st.isolate_rejections = true;
                        again = true;
                        continue;
                    }
                    let Some(k) = owners.first().map(|k| (*k).clone()) else {
                        return Err(e);
                    };
                    let e2 = st.items[&k].clone();
                    let req = e2.request(&st.requests).clone();
                    st.rollback_cause = Some(crate::metrics::REQUEST_REJECTED);
                    self.rollback_locked(st).await?;
                    return Err(Error::RequestRejected {
                        tx_id: self.id.clone(),
                        request_index: e2.index(),
                        table: req.table,
                        message: match &e {
                            Error::DynamoDb { message, .. } => {
                                request::explain_rejection(message.clone().unwrap_or_default())
                            }
                            other => other.to_string(),
                        },
                    });
                }
                Err(e) => return Err(e),
            };
            match out {
                Transacted::Ok => {
                    for k in os.iter().flatten() {
                        let op = st.items[k].op(&st.requests);
                        if let Some(l) = st.items.get_mut(k).and_then(|e| e.lock.as_mut()) {
                            // Every write is applied (a delete marked) before commit; reads are not.
                            if op.is_write() {
                                l.applied = true;
                            }
                        }
                    }
                }
                Transacted::Cancelled(reasons) => {
                    if reasons[0].is_transient() {
                        st.transient = Some(crate::settle::cancelled_error(&reasons[0]));
                        again = true;
                        continue;
                    }
                    if !reasons[0].is_ok() {
                        check_failed.get_or_insert(reasons[0].clone());
                        continue;
                    }
                    match self.items_failed(st, &batch, &os, &reasons, 1).await? {
                        CommitStep::Again => again = true,
                        CommitStep::Done => return Ok(CommitStep::Done),
                    }
                }
            }
        }
        if let Some(reason) = check_failed {
            if gates.is_some() && reason.is_condition_failed() {
                // A gate is decided (or gone): so is the record; read it.
                let header =
                    record::load_header(&self.inner.client, &self.inner.tx_table, &self.id).await?;
                return self.header_found(st, header).await;
            }
            return self.header_failed(st, &reason).await;
        }
        if again {
            if st.transient.is_some() {
                crate::settings::backoff(&self.inner.settings, 1).await;
            }
            return Ok(CommitStep::Again);
        }
        // 2. Flip (the record's gates with it: no batch checking one lands after this).
        let flipped = match record::decide(
            c,
            &self.inner.tx_table,
            &self.id,
            meta.version,
            TxState::Committed,
            meta.gated,
        )
        .await
        {
            Ok(f) => f,
            // Ambiguous, or the SDK's retry of an attempt that may have landed failed otherwise.
            Err(e @ Error::DynamoDb { .. }) => {
                return self.learn_after_ambiguous_commit(st, e).await;
            }
            Err(e) => return Err(e),
        };
        match flipped {
            Flipped::Ok => {}
            Flipped::Failed(Some(h)) if h.state == TxState::Committed => {}
            Flipped::Failed(header) => {
                self.absorb_conflict(st, header).await?;
                return Ok(CommitStep::Again);
            }
        }
        st.outcome = Some(TxState::Committed);
        let rolled = st
            .items
            .values()
            .filter_map(|e| e.lock.as_ref())
            .filter(|l| l.roll.is_some() && !l.applied)
            .count();
        crate::metrics::rolled_forward(rolled);
        debug!(tx = %self.id, items = st.items.len(), rolled, "committed; unlocking");
        // 3-4. Unlock and finalize. The transaction is committed whatever happens here; a failure
        // is retried (bounded), and only when that keeps failing does commit say "committed, not
        // finished" (locks left are seen through by readers and released by others).
        self.settle_committed(st, true).await?;
        Ok(CommitStep::Done)
    }
}
