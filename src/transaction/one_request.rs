//! The one-request commit: once every item is locked, one `TransactWriteItems` flips (and
//! finalizes) the record and makes every item's final write (apply and unlock together).

use tracing::{debug, instrument};

use crate::ddb::{self, Transacted, Write};
use crate::error::{Error, Result};
use crate::item_lock::{self, ImagePlace, Stage};
use crate::keys::ItemRef;
use crate::record::{self, TxState};
use crate::request::{self, Request};
use crate::settle::{Entry, cancelled_error};

use super::commit::is_rejection;
use super::{CommitStep, State, Transaction};

/// One-request commits cancelled because a waiter registered since the last one, after which the
/// commit goes phased.
const REGISTRATION_RETRIES: u32 = 3;

/// The waiters registered in the record (`Settings::wait_in_ticket_order`) as a coordinator last
/// learned them. A one-request commit decides and unlocks at once, so it carries these into the
/// items' queues and lands only if the record still counts exactly these (`_TxJN`): a waiter that
/// registers later cancels it, and the cancelled request's record says who registered.
#[derive(Debug, Default)]
pub(super) struct Registrations {
    /// `_TxJN`: registrations that landed in the record.
    count: u64,
    /// The entries, by item (`queue::item_hash`).
    entries: std::collections::BTreeMap<String, item_lock::queue::Entries>,
    /// One-request commits cancelled by a registration.
    retries: u32,
}

impl Transaction {
    pub(super) fn one_shot_fits(&self, st: &State) -> bool {
        let max = self.inner.settings.one_shot_max_items;
        // Waiters kept registering between our attempts: the phased commit reads them after the
        // decision, when no more can land.
        if st.registrations.retries >= REGISTRATION_RETRIES {
            return false;
        }
        if st.items.len() > max || st.isolate_rejections {
            return false;
        }
        // An update whose result may come within the lock attributes' room of 400 KB goes through
        // the phased apply, where DynamoDB judges the item with its lock attributes, so that every
        // path accepts the same writes.
        let near_limit = st.items.values().any(|e| {
            e.lock.as_ref().is_some_and(|l| !l.applied)
                && e.write.is_some_and(|w| {
                    let req = &st.requests[w];
                    let before = e.lock.as_ref().and_then(|l| l.before.as_ref());
                    request::result_size_bound(before, req) + request::APPLIED_ROOM_BYTES
                        > request::MAX_ITEM_BYTES
                })
        });
        if near_limit {
            return false;
        }
        let actions: usize = 1 + st
            .items
            .values()
            .map(|e| {
                let req = e.request(&st.requests);
                1 + usize::from(
                    req.condition.is_some() && e.lock.as_ref().is_some_and(|l| l.transient),
                ) + usize::from(self.image_to_delete(e, &st.requests).is_some())
            })
            .sum::<usize>();
        let bytes: usize = st
            .items
            .values()
            .map(|e| e.request(&st.requests).encoded_size() * 2)
            .sum();
        actions <= ddb::MAX_TRANSACT_ACTIONS && bytes < ddb::MAX_TRANSACT_BYTES
    }

    /// The images-table row to delete in the same request as an item's final write: the image an
    /// applied item points to, or the one a coordinator may have saved just before applying.
    pub(super) fn image_to_delete(&self, e: &Entry, requests: &[Request]) -> Option<String> {
        let lock = e.lock.as_ref()?;
        if lock.applied {
            return lock.image_ref.clone();
        }
        let req = &requests[e.write?];
        item_lock::unapplied_image_id(
            &self.id,
            req,
            lock.transient,
            lock.before.as_ref(),
            lock.stamp.as_deref(),
        )
    }

    /// The final writes of every item, for the one-request commit. Returns (writes, owner entry per write).
    pub(super) fn final_writes(&self, st: &State) -> Result<(Vec<Write>, Vec<Option<ItemRef>>)> {
        let mut writes = Vec::new();
        let mut owners = Vec::new();
        for (k, e) in &st.items {
            let lock = e
                .lock
                .as_ref()
                .ok_or_else(|| Error::invariant("committing an unlocked item"))?;
            let op = e.op(&st.requests);
            let ws = if lock.applied {
                let obs = lock.as_observed(&self.id);
                item_lock::settle_write(true, op, &e.table, &e.key, &obs, &self.id, None)?
                    .into_iter()
                    .collect()
            } else {
                let req = e.request(&st.requests);
                let schema = self
                    .inner
                    .schemas
                    .cached(&req.table)
                    .ok_or_else(|| Error::invariant("schema not cached"))?;
                item_lock::request_writes(
                    req,
                    lock,
                    &schema,
                    &self.id,
                    Stage::Final,
                    &ImagePlace::Embedded,
                )
            };
            for w in ws {
                writes.push(w);
                owners.push(Some(k.clone()));
            }
            if let Some(id) = self.image_to_delete(e, &st.requests) {
                writes.push(item_lock::image_delete_write(&self.inner.image_table, &id));
                owners.push(Some(k.clone()));
            }
        }
        Ok((writes, owners))
    }

    /// Whether the requests not yet in the record can be recorded by the one-request commit itself
    /// (folded into its decisive write): the record exists and holds them in its header row, and
    /// every item is already locked by this handle, so the commit locks nothing new and an item
    /// is only ever written in the request that also records its request and decides.
    pub(super) fn append_folds_into_commit(&self, st: &State) -> bool {
        let Some(meta) = st.meta else {
            return false;
        };
        let pending = &st.requests[st.recorded..];
        !pending.is_empty()
            && !st.record_in_doubt
            && !self.only_held_reads_unrecorded(st)
            && st.items.values().all(|e| e.lock.is_some())
            && record::folds_inline(meta, pending)
            && self.one_shot_fits(st)
    }

    /// Commits with one `TransactWriteItems`: the record's flip (and finalization) plus every item's
    /// final write, and the requests not yet in the record when they fold into it.
    #[instrument(level = "debug", name = "commit_one_request", skip_all, fields(tx = %self.id, items = st.items.len()))]
    pub(super) async fn commit_one_shot(&self, st: &mut State) -> Result<CommitStep> {
        let _timer = crate::metrics::PhaseTimer::start(crate::metrics::COMMIT);
        let meta = st.meta.expect("flushed");
        let (mut item_writes, owners) = self.final_writes(st)?;
        let mut decision = record::decide_final_write(
            &self.inner.tx_table,
            &self.id,
            meta.version,
            TxState::Committed,
            self.inner.settings.record_ttl_secs(),
        );
        let folded = st.recorded < st.requests.len() && !self.only_held_reads_unrecorded(st);
        if folded {
            let nonce = uuid::Uuid::new_v4().to_string();
            record::fold_into_decision(&mut decision, &st.requests[st.recorded..], &nonce);
            st.fold_nonces.push(nonce);
        }
        let queues = self.inner.settings.queues();
        if queues {
            self.carry_registrations(st, &mut decision, &mut item_writes, &owners);
        }
        let mut writes = vec![decision];
        writes.extend(item_writes);
        let c = &self.inner.client;
        let out = match ddb::transact(c, &writes).await {
            Ok(o) => o,
            Err(e) if is_rejection(&e) => {
                // The batch was rejected as a whole: find the request by applying item by item.
                st.isolate_rejections = true;
                return Ok(CommitStep::Again);
            }
            // A timeout, a 5xx, or the SDK's retry of an attempt that may have landed failing
            // otherwise: the record tells whether the commit landed.
            Err(e @ Error::DynamoDb { .. }) => {
                return self.learn_after_ambiguous_commit(st, e).await;
            }
            Err(e) => return Err(e),
        };
        match out {
            Transacted::Ok => {
                debug!(tx = %self.id, items = st.items.len(), folded, "committed in one request");
                if folded {
                    st.recorded = st.requests.len();
                }
                st.outcome = Some(TxState::Committed);
                self.after_finalize(st).await;
                Ok(CommitStep::Done)
            }
            Transacted::Cancelled(reasons) => {
                if let Some(r) = reasons.iter().find(|r| r.is_transient()) {
                    // Throttled or in conflict: this attempt applied nothing, but an earlier
                    // attempt of it (the SDK retries 5xx answers) may have. The record tells.
                    return self
                        .learn_after_ambiguous_commit(st, cancelled_error(r))
                        .await;
                }
                if queues && self.learned_registrations(st, &reasons[0])? {
                    return Ok(CommitStep::Again);
                }
                if !reasons[0].is_ok() {
                    return self.header_failed(st, &reasons[0]).await;
                }
                self.items_failed(st, &writes, &owners, &reasons, 1).await
            }
        }
    }

    /// Makes the one-request commit carry the registrations this handle knows
    /// (`Settings::wait_in_ticket_order`): each item's unlock writes its queue merged with them
    /// (less expired entries and the transaction's own), and the decision lands only if the record
    /// counts no other registration.
    fn carry_registrations(
        &self,
        st: &State,
        decision: &mut Write,
        item_writes: &mut [Write],
        owners: &[Option<ItemRef>],
    ) {
        let count = st.registrations.count;
        let ph = &mut decision.ph;
        let reg = ph.name(record::REGISTERED);
        let none = format!("attribute_not_exists({reg})");
        let same = if count == 0 {
            none
        } else {
            let v = ph.value(
                "Registered",
                aws_sdk_dynamodb::types::AttributeValue::N(count.to_string()),
            );
            format!("{reg} = {v}")
        };
        decision.and_condition(same);
        let own = self
            .ticket_recorded
            .get()
            .copied()
            .or(self.proposed_ticket());
        let registered = &st.registrations.entries;
        for (w, owner) in item_writes.iter_mut().zip(owners) {
            let Some(e) = owner.as_ref().and_then(|k| st.items.get(k)) else {
                continue;
            };
            // The item's write, not its images-table row.
            let (Some(lock), true) = (&e.lock, w.table == e.table) else {
                continue;
            };
            let item = (e.table.as_str(), &e.key);
            item_lock::queue::carry_merged(w, &lock.queue, registered, item, own);
        }
    }

    /// A one-request commit cancelled by the record's condition: when the record is still pending
    /// at our version, only its count of registrations moved (a waiter registered since): learn
    /// them from the record the cancellation returned, and try again. False when the record
    /// changed otherwise (left for [`header_failed`](Self::header_failed)).
    fn learned_registrations(&self, st: &mut State, reason: &ddb::Reason) -> Result<bool> {
        if !reason.is_condition_failed() {
            return Ok(false);
        }
        let Some(row) = &reason.item else {
            return Ok(false);
        };
        let Some(header) = record::Header::parse_live(row)? else {
            return Ok(false);
        };
        let count = item_lock::queue::registered_count(row);
        let ours = st.meta.is_some_and(|m| m.version == header.version);
        if header.state != TxState::Pending || !ours || count == st.registrations.count {
            return Ok(false);
        }
        debug!(tx = %self.id, count, "a waiter registered: committing again with it");
        st.registrations.count = count;
        st.registrations.entries = item_lock::queue::registrations(row);
        st.registrations.retries += 1;
        Ok(true)
    }

    /// Hook after the one-request commit (which finalizes the record, with its TTL, and deletes the
    /// items' images-table rows in the same write).
    pub(super) async fn after_finalize(&self, st: &mut State) {
        for e in st.items.values_mut() {
            e.lock = None;
        }
    }
}
