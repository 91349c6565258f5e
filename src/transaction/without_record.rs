//! A record only when needed (`Settings::record_on_demand`): the first locked read of a
//! transaction takes its lock alone, and a transaction that then writes only that item commits
//! with one conditional write on it, without ever writing a record (docs/PROTOCOL.md "A record
//! only when needed").
//!
//! The lock is one whose record is absent, so whoever meets it treats it like the first read's
//! lock of `LockedReads::RecordWithLock` before its creation lands: the holder gets `wound_grace`,
//! then the lock is released under a tombstone (`record::put_tombstone`), on which a later
//! creation fails. The commit is conditional on our lock still being there, unapplied: it lands
//! only if nobody released the lock, and then the item changes and is unlocked in that one write,
//! all or nothing. A transaction that needs more (another item, a write applied early, a
//! hand-off) creates its record then, naming the read, as any record write does.

use std::sync::atomic::Ordering;

use tracing::{debug, instrument};

use aws_sdk_dynamodb::types::AttributeValue;

use crate::ddb::{Write, Written};
use crate::error::{Error, Result};
use crate::item_lock::{LOCK_DATE, LockInfo, Observed};
use crate::keys::ItemRef;
use crate::record::{self, TxState};

use super::{State, Transaction};

/// Sends of the commit's write, counting the resends after a lost answer or a refusal for a
/// transaction in flight.
const COMMIT_SENDS: u32 = 4;

impl Transaction {
    /// Whether a read of `r` may take its lock without a record: the setting is on (and items
    /// have no queues, whose waiters register in the holder's record), this transaction never
    /// wrote a record nor sent a creation, and `r` is the only item it knows.
    pub(super) fn may_lock_without_record(&self, st: &State, r: &ItemRef) -> bool {
        let s = &self.inner.settings;
        s.record_on_demand
            && !s.queues()
            && st.meta.is_none()
            && !st.record_in_doubt
            && !st.fast_path_sent
            && st.items.len() == 1
            && st.items.get(r).is_some_and(|e| e.lock.is_none())
    }

    /// Locks `r`'s item for a read, without a record (waiting for a holder as any lock does).
    pub(super) async fn lock_without_record(
        &self,
        st: &mut State,
        r: &ItemRef,
    ) -> Result<LockInfo> {
        let e = st.items[r].clone();
        let first = self.expected_existence(st, r).await?;
        // With `ticket_at_begin`, the ticket goes out with the lock (which carries it for whoever
        // meets it before our record exists); the record gets the same one at its creation.
        self.ticket_for_record().await?;
        // The lock is in no record: the table is listed first, for the sweeper to find it.
        let inner = &self.inner;
        (inner.unrecorded_tables)
            .ensure(&inner.client, &inner.tx_table, &e.table)
            .await?;
        // When the first attempt went out: the lock that lands went out then or later, which
        // bounds how long a creation may take to trust it (see `check_unrecorded_lock`).
        st.unrecorded_lock_sent = Some(tokio::time::Instant::now());
        let lock = Box::pin(self.lock_one(
            &e.table,
            &e.key,
            first,
            true,
            super::reorder::Placement::InOrder,
        ))
        .await?;
        st.items.get_mut(r).expect("entry exists").lock = Some(lock.clone());
        Ok(lock)
    }

    /// After this transaction's record was created: a lock taken without a record is trusted only
    /// if the creation was answered less than half a tombstone's life after the lock went out (as
    /// for a lock sent with the creation, `lock_with_creation`). Otherwise a tombstone may have
    /// released it and gone, and the read's value may be stale: the transaction is rolled back.
    pub(super) async fn check_unrecorded_lock(&self, st: &mut State) -> Result<()> {
        let Some(sent) = st.unrecorded_lock_sent.take() else {
            return Ok(());
        };
        if sent.elapsed() < record::KEEP / 2 {
            return Ok(());
        }
        st.rollback_cause = Some(crate::metrics::REQUESTED);
        self.rollback_locked(st).await?;
        Err(Error::RolledBack {
            tx_id: self.id.clone(),
        })
    }

    /// The commit's one write, when the commit is one write on the item read without a record:
    /// no record was written or may have been, the one item known is held by that lock,
    /// unapplied, and its final write is one the one-request commit would send (an update that
    /// may come near DynamoDB's item size limit goes through the phased apply on every path,
    /// after the record's creation). That final write is made conditional also on our lock's
    /// stamp. The one-request commit needs no stamp (its record's decision, in the same request,
    /// lands only while the transaction is pending); here the lock is all there is, and a lock
    /// attempt of ours that lands late (after a contender released our lock and changed the
    /// item) must not pass for the lock our read took. When the transaction's writes are marked
    /// for the change feed (`Settings::fast_path_stamps`), the write sets `_TxM` to our id: the
    /// feed then knows it committed the transaction whole, with no record to read; a delete,
    /// which leaves nothing to mark, then commits through a record.
    pub(super) fn write_without_record(&self, st: &State) -> Option<(Write, ItemRef)> {
        let fits = st.unrecorded_lock_sent.is_some()
            && st.meta.is_none()
            && !st.record_in_doubt
            && st.items.len() == 1
            && st.items.values().all(|e| {
                e.lock.as_ref().is_some_and(|l| !l.applied)
                    && self.image_to_delete(e, &st.requests).is_none()
            })
            && self.one_shot_fits(st);
        if !fits {
            return None;
        }
        let (writes, owners) = self.final_writes(st).ok()?;
        let ([w], [Some(k)]) = (&writes[..], &owners[..]) else {
            return None;
        };
        let stamp = st.items.get(k)?.lock.as_ref()?.stamp.clone()?;
        let mut w = w.clone();
        let cond = format!(
            "{} = {}",
            w.ph.name(LOCK_DATE),
            w.ph.value("Stamp", AttributeValue::N(stamp))
        );
        w.and_condition(cond);
        // For the change feed, which has no record to read: this write is the whole transaction,
        // committed (a delete leaves no item to mark, so it goes through a record).
        if self.marks_writes(st) && !crate::item_lock::mark_made(&mut w, &self.id) {
            return None;
        }
        Some((w, k.clone()))
    }

    /// `write`, the commit's one write on `k` (see [`Self::write_without_record`]), made to hand
    /// the item over to its oldest live waiter as this transaction last saw the item, when that
    /// waiter takes it (`Settings::hand_over`, see [`crate::item_lock::handover`]). None otherwise:
    /// the item is released as usual.
    fn handover_write(&self, st: &State, k: &ItemRef, write: &Write) -> Option<(Write, String)> {
        if !self.inner.settings.hands_over() {
            return None;
        }
        let lock = st.items.get(k)?.lock.as_ref()?;
        let now = crate::ddb::now_millis();
        let target = lock.waiters.target(now)?;
        if target.id == self.id.as_str() {
            return None;
        }
        crate::item_lock::handover::hand_over(write, &target, now).map(|w| (w, target.id))
    }

    /// Commits with `write` on the only item, `k` (see [`Self::write_without_record`]): its final
    /// write (the write applied and the lock removed, or only the lock removed after a read
    /// alone), conditional on our lock. After a lost answer the write is sent again. Our lock
    /// found gone with no tombstone for us means a send of this write removed it (nobody else
    /// releases a lock whose record is absent without one), whether we resent it or the SDK
    /// did on its own: committed. With a tombstone, a contender released it: rolled back, or
    /// unknown when an attempt of ours whose answer we missed (a lost answer, or the SDK's own
    /// resend after a 5xx or a reset connection) may have landed first.
    #[instrument(level = "debug", name = "commit_without_record", skip_all, fields(tx = %self.id))]
    pub(super) async fn commit_without_record(
        &self,
        st: &mut State,
        write: Write,
        k: &ItemRef,
    ) -> Result<()> {
        let _timer = crate::metrics::PhaseTimer::start(crate::metrics::COMMIT);
        let c = &self.inner.client;
        let mut in_doubt = false;
        let mut last_err = None;
        self.wrote.store(true, Ordering::SeqCst);
        // The item handed over to its oldest waiter in the same write, when it has one that
        // takes it (`Settings::hand_over`).
        let mut handover = self.handover_write(st, k, &write);
        // Every attempt of the write, the SDK's own resends included: our lock found gone beside
        // a tombstone is a rollback only if no attempt whose answer we missed may have landed.
        let sends = crate::ddb::Transmissions::default();
        for _ in 0..COMMIT_SENDS {
            let (sent, to) = match &handover {
                Some((w, to)) => (w, Some(to.as_str())),
                None => (&write, None),
            };
            // A waiter of this manager is told the item as the handover leaves it.
            let told = to.filter(|to| self.inner.notices.awaited(to, k));
            let all_new = told.map(|_| aws_sdk_dynamodb::types::ReturnValue::AllNew);
            let failed = match sent.send_counted(c, all_new, Some(&sends)).await {
                Ok(Written::Ok(new)) => {
                    let handed = handover.is_some();
                    if let (Some(to), Some(new)) = (told, new) {
                        self.inner.notices.tell(to, k, new);
                    }
                    debug!(tx = %self.id, handed, told = told.is_some(), "committed without a record");
                    st.outcome = Some(TxState::Committed);
                    st.items.get_mut(k).expect("entry").lock = None;
                    st.unrecorded_lock_sent = None;
                    return Ok(());
                }
                Ok(Written::ConditionFailed(found)) => found,
                Err(e @ Error::DynamoDb { ambiguous, .. }) if ambiguous || e.is_retryable() => {
                    in_doubt |= ambiguous;
                    last_err = Some(e);
                    crate::settings::backoff(&self.inner.settings, 1).await;
                    continue;
                }
                Err(e) if super::commit::is_rejection(&e) => {
                    // Nothing landed: the lock is still ours.
                    let message = match &e {
                        Error::DynamoDb { message, .. } => message.clone().unwrap_or_default(),
                        _ => e.to_string(),
                    };
                    let entry = st.items[k].clone();
                    return Err(self.roll_back_rejected(st, &entry, message).await?);
                }
                Err(e) => return Err(e),
            };
            let e = st.items[k].clone();
            let obs = Observed::of(failed.as_ref());
            let lock = e.lock.as_ref().expect("held");
            if obs.holds(&self.id, lock) && handover.take().is_some() {
                // Still ours, refused for the handover (its waiter left, or its mark went) or
                // for the request's own condition: sent again as a plain unlock, which tells.
                debug!(tx = %self.id, "handover refused; committing with a plain unlock");
                continue;
            }
            if obs.holds(&self.id, lock) {
                // Still ours: the request's own condition is false.
                return Err(self
                    .roll_back_condition_failed(st, &e, obs.visible())
                    .await?);
            }
            st.items.get_mut(k).expect("entry").lock = None;
            st.unrecorded_lock_sent = None;
            if obs.locked_by(&self.id) && !obs.applied {
                // A lock attempt of ours that landed late, after ours was released: release it.
                let mut late = e.clone();
                late.lock = Some(LockInfo::from_observed(&obs));
                crate::settle::release_unapplied_lock(&self.inner, &self.id, &mut late).await?;
            }
            // Our lock gone: a contender released it under a tombstone, or a send of this very
            // write removed it: ours after a lost answer (in doubt), or one the SDK sent again
            // on its own after the first landed (a 5xx or a reset connection it retried), whose
            // answer we never saw. Nobody else releases a lock whose record is absent without a
            // tombstone: with none, the commit landed. With one, the contender that put it may
            // have met our lock before our commit landed, and its release then found nothing:
            // a rollback only if no send of ours may have landed unseen.
            let row = record::load_header_row(c, &self.inner.tx_table, &self.id).await?;
            if row.is_none() {
                st.outcome = Some(TxState::Committed);
                return Ok(());
            }
            if !in_doubt && !sends.unseen() {
                st.outcome = Some(TxState::RolledBack);
                return Err(self.rolled_back());
            }
            return Err(Error::UnknownOutcome {
                tx_id: self.id.clone(),
            });
        }
        let cause = last_err.unwrap_or_else(|| Error::invariant("commit without record: no send"));
        if in_doubt {
            // An earlier send may have landed, or may still.
            return Err(Error::Undetermined {
                tx_id: self.id.clone(),
                source: Box::new(cause),
            });
        }
        // Nothing landed: the lock is still ours, and the transaction still open.
        Err(cause)
    }
}
