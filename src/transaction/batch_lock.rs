//! Batched locks (`Settings::batch_locks`): a small transaction writes its record and takes every
//! lock in one `TransactWriteItems`; a larger one takes its locks in `TransactWriteItems` of up to
//! 99 after its record. A successful `TransactWriteItems` returns no items: the one-request commit
//! needs none (padding makes DynamoDB check each write's room in the lock), and the before-images a
//! phased apply needs are read with consistent reads after the locks. A batch locks existing items;
//! when it is cancelled only because some items are absent (or, on its retry, present), it is sent
//! once more with a placeholder lock for each absent item. Whatever a batch cannot settle (a
//! cancellation for another reason, an ambiguous failure, an item locked by another transaction)
//! is left to the per-item lock phase ([`lock_all`](Transaction::lock_all)), which recognises its
//! own record and locks. See docs/PROTOCOL.md "Batched locks".

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;

use futures::StreamExt;
use tracing::debug;

use crate::ddb::{self, Reason, Transacted, Write};
use crate::error::Result;
use crate::item_lock::{self, Existence, LockInfo, Observed};
use crate::keys::ItemRef;
use crate::record;
use crate::request::{self, Op};

use super::{State, Transaction};

/// Most locks in one `TransactWriteItems` (100 actions: the locks plus the record or its check).
const LOCKS_PER_BATCH: usize = 99;

/// Locks a batch landed, with their stamps, whose before-images are still to be read.
type Unread = Vec<(ItemRef, String)>;

/// Locks a batch landed: the item, the lock's stamp, and whether it locked an existing item or
/// inserted a placeholder for an absent one.
type Landed = Vec<(ItemRef, String, Existence)>;

impl Transaction {
    /// Records the requests and takes what locks it can in batches, before the per-item lock
    /// phase takes the rest. Errors are those of recording the requests; a batch that fails in
    /// any way only leaves its items to the per-item phase.
    pub(super) async fn lock_batched(&self, st: &mut State) -> Result<()> {
        let mut per_item = BTreeSet::new();
        let mut landed = Landed::new();
        // A fast path that did not commit met a locked item: a batch would meet it too.
        let fresh =
            st.meta.is_none() && !st.record_in_doubt && st.recorded == 0 && !st.fast_path_failed;
        let mut batched = false;
        if fresh && let Some(outcome) = self.record_and_lock(st).await? {
            match outcome {
                Ok(locked) => {
                    landed = locked;
                    batched = true;
                }
                Err(failed) => per_item = failed,
            }
        }
        if !self.append_folds_into_commit(st) {
            self.flush(st).await?;
        }
        if !batched {
            landed = self.lock_in_batches(st, &per_item).await;
        }
        // A placeholder's item did not exist: its lock is known whole, with nothing to read.
        let mut unread = Unread::new();
        for (k, stamp, existence) in landed {
            // Its manager's waiters wait for it in process.
            self.inner.notices.holds(self.id.as_str(), &k);
            match existence {
                Existence::Absent => {
                    let roll = self.roll_index(st, &k);
                    st.items.get_mut(&k).expect("entry exists").lock =
                        Some(LockInfo::placeholder(stamp, roll));
                }
                Existence::Present => unread.push((k, stamp)),
            }
        }
        // The one-request commit needs no before-image, only the room for each write, which the
        // lock's padding made DynamoDB check; a write whose room depends on what the item holds
        // has its item read now. The phased apply reads the others when it needs them.
        let (read, keep_unread): (Unread, Unread) = unread
            .into_iter()
            .partition(|(k, _)| lock_pad(st, k).is_none());
        for (k, stamp) in keep_unread {
            let roll = self.roll_index(st, &k);
            st.items.get_mut(&k).expect("entry exists").lock = Some(LockInfo::unread(stamp, roll));
        }
        self.read_images(st, read).await;
        Ok(())
    }

    /// Reads the items of the locks a batch took without reading them, before a step that needs
    /// their before-images (the phased apply). Returns false when a lock is gone (the transaction
    /// was decided by someone else): the entry is then unlocked, for the lock phase to resolve.
    pub(super) async fn ensure_images(&self, st: &mut State) -> bool {
        let mut unread = Unread::new();
        for (k, e) in &st.items {
            let Some(l) = e.lock.as_ref().filter(|l| l.image_unread) else {
                continue;
            };
            let Some(stamp) = l.stamp.clone() else {
                continue;
            };
            // A put or delete rolled forward needs nothing of the item; applied before the commit,
            // a put needs its before-image.
            let op = e.op(&st.requests);
            if matches!(op, Op::Put | Op::Delete) && self.rolls_forward(e, &st.requests).await {
                continue;
            }
            unread.push((k.clone(), stamp));
        }
        if unread.is_empty() {
            return true;
        }
        let keys: Vec<ItemRef> = unread.iter().map(|(k, _)| k.clone()).collect();
        self.read_images(st, unread).await;
        keys.iter().all(|k| st.items[k].lock.is_some())
    }

    /// The record's creation plus one lock per item in one `TransactWriteItems`, if they fit, sent
    /// again once with placeholders for the absent items if that is all that cancelled it.
    /// `None`: not tried; `Ok`: the record and every lock landed; `Err`: nothing was written, with
    /// the items whose condition failed (to be locked item by item).
    async fn record_and_lock(
        &self,
        st: &mut State,
    ) -> Result<Option<std::result::Result<Landed, BTreeSet<ItemRef>>>> {
        if st.items.len() > LOCKS_PER_BATCH || st.items.values().any(|e| e.lock.is_some()) {
            return Ok(None);
        }
        // Timed as the record's phase: the locks ride in the request that writes the record.
        let _timer = crate::metrics::PhaseTimer::start(crate::metrics::RECORD);
        let ticket = self.ticket_for_record().await?;
        let tx_table = &self.inner.tx_table;
        let keys: Vec<ItemRef> = st.items.keys().cloned().collect();
        let mut creation = record::creation(tx_table, &self.id, &st.requests, ticket);
        if creation.writes.len() + keys.len() > ddb::MAX_TRANSACT_ACTIONS {
            // No room for the chunk rows beside the locks: the requests in the header, if they fit.
            creation = record::creation_inline(tx_table, &self.id, &st.requests, ticket);
        }
        if creation.split < st.requests.len() {
            return Ok(None); // the record needs chunk rows: it is written on its own
        }
        let mut forms = self.first_forms(st, &keys).await?;
        for attempt in 0..2 {
            // The header, the locks, then the chunk rows the header counts (if any): a lock's
            // reason follows the record's.
            let mut writes = vec![creation.writes[0].clone()];
            let locks = self.lock_writes(st, &keys, &forms).await?;
            writes.extend(locks.iter().map(|(w, _)| w.clone()));
            writes.extend(creation.writes[1..].iter().cloned());
            if writes.len() > ddb::MAX_TRANSACT_ACTIONS
                || writes.iter().map(Write::size).sum::<usize>() >= ddb::MAX_TRANSACT_BYTES
            {
                return Ok(None);
            }
            let refs = landed(&keys, &forms, locks);
            self.wrote.store(true, Ordering::SeqCst);
            // The SDK's retries of this call reuse its ClientRequestToken: a retry of a request
            // that landed is answered with success and writes nothing.
            st.record_in_doubt = true;
            let token = Some(uuid::Uuid::new_v4().to_string());
            match ddb::transact_with_token(&self.inner.client, &writes, token).await {
                Ok(Transacted::Ok) => {
                    debug!(tx = %self.id, items = refs.len(), attempt, "record and locks written in one request");
                    st.meta = Some(creation.meta);
                    st.recorded = st.requests.len();
                    st.record_in_doubt = false;
                    if let Some(t) = ticket {
                        let _ = self.ticket_recorded.set(t);
                    }
                    return Ok(Some(Ok(refs)));
                }
                Ok(Transacted::Cancelled(reasons)) => {
                    // Nothing was written, not the record either. A failed record condition means
                    // an earlier attempt landed (or another handle wrote it): the record stays in
                    // doubt, and the per-item path merges it.
                    st.record_in_doubt = !reasons[0].is_ok();
                    let lock_reasons = &reasons[1..1 + keys.len()];
                    if attempt == 0
                        && reasons[0].is_ok()
                        && reasons[1 + keys.len()..].iter().all(|r| r.is_ok())
                        && let Some(f) = corrected_forms(&forms, lock_reasons)
                    {
                        crate::metrics::retry(crate::metrics::LOCK_BATCH_ABSENT);
                        forms = f;
                        continue;
                    }
                    let failed = keys
                        .iter()
                        .zip(lock_reasons)
                        .filter(|(_, r)| !r.is_ok())
                        .map(|(k, _)| k.clone())
                        .collect();
                    crate::metrics::retry(crate::metrics::LOCK_BATCH_FALLBACK);
                    return Ok(Some(Err(failed)));
                }
                Err(e) => {
                    // Possibly landed (every lock and the record): the record stays in doubt, and
                    // the per-item path recognises our record by its requests and our locks by
                    // `_TxId`.
                    st.record_in_doubt = e.may_have_landed();
                    debug!(tx = %self.id, error = %e, "batched record and locks failed; per item");
                    crate::metrics::retry(crate::metrics::LOCK_BATCH_FALLBACK);
                    return Ok(Some(Err(keys.into_iter().collect())));
                }
            }
        }
        unreachable!("the second attempt returns")
    }

    /// What a batch's first request assumes of each item ([`Transaction::expected_existence`]).
    /// A wrong guess costs the batch one more request (see `corrected_forms`).
    async fn first_forms(&self, st: &State, keys: &[ItemRef]) -> Result<Vec<Existence>> {
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            out.push(self.expected_existence(st, k).await?);
        }
        Ok(out)
    }

    /// The lock write of each of `keys`, as `forms` assumes its item, with its stamp.
    async fn lock_writes(
        &self,
        st: &State,
        keys: &[ItemRef],
        forms: &[Existence],
    ) -> Result<Vec<(Write, String)>> {
        self.lock_requests.fetch_add(keys.len(), Ordering::SeqCst);
        let mut out = Vec::with_capacity(keys.len());
        for (k, &existence) in keys.iter().zip(forms) {
            let e = &st.items[k];
            let schema = self.schema(&e.table).await?;
            // A write rolled forward has its room judged on the item read under the lock: no
            // padding (which only the one-request commit needs).
            let roll = self.roll_index(st, k);
            let pad = if roll.is_some() {
                0
            } else {
                lock_pad(st, k).unwrap_or(0)
            };
            let (mut w, stamp) = item_lock::lock_item_write(
                &e.table,
                &e.key,
                &schema,
                &self.id,
                existence,
                pad,
                roll,
                item_lock::Guard::Free,
            );
            // Waiting in ticket order: a lock that reads nothing takes only items without a
            // queue (which it then knows is empty); the others are locked item by item.
            if self.inner.settings.queues() && existence == Existence::Present {
                item_lock::queue::require_none(&mut w);
            }
            out.push((w, stamp));
        }
        Ok(out)
    }

    /// The record index of the write a batched lock of `k` marks for rolling forward (`_TxU`):
    /// with [`Settings::roll_forward`](crate::Settings::roll_forward), every write of a transaction
    /// that commits in phases. Whether it is rolled forward is decided before the commit
    /// (`phased::rolls_forward`); a marked write applied before the commit is settled as any
    /// applied write.
    pub(super) fn roll_index(&self, st: &State, k: &ItemRef) -> Option<usize> {
        let settings = &self.inner.settings;
        if !settings.roll_forward || st.items.len() <= settings.one_shot_max_items {
            return None;
        }
        let w = st.items.get(k)?.write?;
        let req = &st.requests[w];
        req.op.is_write().then_some(w)
    }

    /// Locks the unlocked items (but those in `skip`) in `TransactWriteItems` of up to 99 locks and
    /// a check that the record is pending, concurrently. Returns the locks that landed; the items of
    /// a batch that did not land are left to the per-item phase.
    async fn lock_in_batches(&self, st: &State, skip: &BTreeSet<ItemRef>) -> Landed {
        let todo: Vec<ItemRef> = st
            .items
            .iter()
            .filter(|(k, e)| e.lock.is_none() && !skip.contains(*k))
            .map(|(k, _)| k.clone())
            .collect();
        if todo.len() < 2 {
            return Landed::new(); // one lock: the per-item write is cheaper
        }
        let _timer = crate::metrics::PhaseTimer::start(crate::metrics::LOCK);
        self.wrote.store(true, Ordering::SeqCst);
        let chunks: Vec<Vec<ItemRef>> = todo.chunks(LOCKS_PER_BATCH).map(<[_]>::to_vec).collect();
        // Concurrent batches check a gate each instead of the header, which they would all
        // touch: DynamoDB cancels a transaction whose item another one in flight touches.
        let gated = st.meta.is_some_and(|m| m.gated);
        let (gates, in_flight) =
            super::phased::batch_gates(chunks.len(), gated, &self.inner.settings);
        let gates = gates.as_ref();
        let results: Vec<Landed> = futures::stream::iter(chunks)
            .map(|chunk| async move { self.lock_batch(st, &chunk, gates).await })
            .buffer_unordered(in_flight)
            .collect()
            .await;
        results.into_iter().flatten().collect()
    }

    /// One batch of locks after the record, with a check that the record is pending (among
    /// concurrent batches, of a gate of its own, which is pending exactly when the header is);
    /// sent again once with placeholders for the absent items if that is all that cancelled it.
    async fn lock_batch(
        &self,
        st: &State,
        keys: &[ItemRef],
        gates: Option<&record::Gates>,
    ) -> Landed {
        let Ok(mut forms) = self.first_forms(st, keys).await else {
            return Landed::new();
        };
        for attempt in 0..2 {
            let Ok(locks) = self.lock_writes(st, keys, &forms).await else {
                return Landed::new();
            };
            let gate = gates.and_then(record::Gates::take);
            let check = match &gate {
                Some(g) => g.pending_check(&self.inner.tx_table, &self.id),
                None => record::pending_check(&self.inner.tx_table, &self.id),
            };
            let mut writes = vec![check];
            writes.extend(locks.iter().map(|(w, _)| w.clone()));
            let refs = landed(keys, &forms, locks);
            match ddb::transact(&self.inner.client, &writes).await {
                Ok(Transacted::Ok) => return refs,
                Ok(Transacted::Cancelled(reasons)) if attempt == 0 && reasons[0].is_ok() => {
                    match corrected_forms(&forms, &reasons[1..]) {
                        Some(f) => {
                            crate::metrics::retry(crate::metrics::LOCK_BATCH_ABSENT);
                            forms = f;
                        }
                        None => break,
                    }
                }
                // Cancelled (nothing landed) or failed (maybe landed: the per-item lock then
                // finds our own lock): item by item.
                _ => break,
            }
        }
        crate::metrics::retry(crate::metrics::LOCK_BATCH_FALLBACK);
        Landed::new()
    }

    /// Reads the items a batch locked (consistent `BatchGetItem`) and keeps the lock of each that
    /// still carries it (our `_TxId` and stamp), with the item as its before-image: the apply is
    /// conditional on that stamp, so the lock stood from the batch to the apply and nobody changed
    /// the item in between. An item that does not, or a failed read, is left unlocked, to the
    /// per-item phase.
    async fn read_images(&self, st: &mut State, unread: Unread) {
        if unread.is_empty() {
            return;
        }
        let keys: Vec<(String, crate::error::Item)> = unread
            .iter()
            .map(|(k, _)| (st.items[k].table.clone(), st.items[k].key.clone()))
            .collect();
        let client = &self.inner.client;
        let reads: Vec<Result<Vec<(String, crate::error::Item)>>> =
            futures::stream::iter(keys.chunks(100).map(<[_]>::to_vec))
                .map(|chunk| async move { ddb::batch_get(client, &chunk).await })
                .buffer_unordered(self.inner.settings.concurrency.clamp(1, 8))
                .collect()
                .await;
        let mut found: HashMap<ItemRef, crate::error::Item> = HashMap::new();
        for (table, item) in reads.into_iter().flat_map(|r| r.unwrap_or_default()) {
            let Ok(schema) = self.schema(&table).await else {
                continue;
            };
            let key = item_lock::key_of(&schema, &item);
            found.insert(ItemRef::new(&table, &key), item);
        }
        for (k, stamp) in unread {
            let obs = Observed::of(found.get(&k));
            let ours = obs.owner.as_deref() == Some(self.id.as_str())
                && obs
                    .stamp
                    .as_deref()
                    .is_some_and(|s| crate::keys::same_number(s, &stamp));
            st.items.get_mut(&k).expect("entry exists").lock =
                ours.then(|| LockInfo::from_observed(&obs));
        }
    }
}

/// What a batch's locks landed, given the writes it sent.
fn landed(keys: &[ItemRef], forms: &[Existence], locks: Vec<(Write, String)>) -> Landed {
    keys.iter()
        .zip(forms)
        .zip(locks)
        .map(|((k, &existence), (_, stamp))| (k.clone(), stamp, existence))
        .collect()
}

/// The forms to send a cancelled batch again with, when all that cancelled it was items that are
/// not what their lock assumed: an absent item under a lock for an existing one (the item's
/// `ALL_OLD` is empty) gets a placeholder, an unlocked existing item under a placeholder is locked
/// as existing. `None` when another reason cancelled it (an item locked by another transaction, a
/// throttled or conflicting action), for the per-item phase to handle.
fn corrected_forms(forms: &[Existence], reasons: &[Reason]) -> Option<Vec<Existence>> {
    let mut out = forms.to_vec();
    let mut changed = false;
    for (form, r) in out.iter_mut().zip(reasons) {
        if r.is_ok() {
            continue;
        }
        if !r.is_condition_failed() {
            return None;
        }
        if !form.mismatched(&Observed::of(r.item.as_ref())) {
            return None;
        }
        *form = form.other();
        changed = true;
    }
    changed.then_some(out)
}

/// The padding of the lock of `k` (see [`request::lock_pad`]): `None` when its room depends on
/// what the item holds, which must then be read.
fn lock_pad(st: &State, k: &ItemRef) -> Option<usize> {
    st.items[k]
        .write
        .map_or(Some(0), |w| request::lock_pad(&st.requests[w]))
}
