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

impl Transaction {
    pub(super) fn one_shot_fits(&self, st: &State) -> bool {
        let max = self.inner.settings.one_shot_max_items;
        // The one-request commit decides and unlocks at once: it cannot carry the registrations
        // that land in the record until the decision (see `Settings::wait_in_ticket_order`).
        if self.inner.settings.queues() {
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
        let (item_writes, owners) = self.final_writes(st)?;
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
                if !reasons[0].is_ok() {
                    return self.header_failed(st, &reasons[0]).await;
                }
                self.items_failed(st, &writes, &owners, &reasons, 1).await
            }
        }
    }

    /// Hook after the one-request commit (which finalizes the record, with its TTL, and deletes the
    /// items' images-table rows in the same write).
    pub(super) async fn after_finalize(&self, st: &mut State) {
        for e in st.items.values_mut() {
            e.lock = None;
        }
    }
}
