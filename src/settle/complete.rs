//! Completing a decided transaction: every item settled (unlocked after a commit, its
//! before-image restored after a rollback), its images-table rows deleted, then the record
//! finalized. Idempotent and safe to run by several coordinators at once: each write is
//! conditional on the item still carrying the lock it judged.

use std::collections::{BTreeMap, HashMap};

use futures::StreamExt;
use tracing::{debug, instrument};

use super::PROTOCOL_ATTEMPTS;
use super::batch::{Isolated, cancelled_error, group_items, send_isolating};
use super::entry::Items;
use crate::TxId;
use crate::ddb::{self, Transacted, Written};
use crate::error::{Error, Item, Result};
use crate::item_lock::{self, Observed};
use crate::keys::ItemRef;
use crate::record::{self, TxState};
use crate::request::Request;
use crate::settings::Inner;

/// Settles every item of a decided transaction (unlock after commit, restore after rollback),
/// deletes images-table images, finalizes the record. `trust_memory`: this coordinator's lock
/// knowledge is fresh (it just applied everything), so items need not be read first.
pub(crate) async fn complete(
    inner: &Inner,
    tx_id: &TxId,
    items: &mut Items,
    requests: &[Request],
    decided: TxState,
    trust_memory: bool,
) -> Result<()> {
    // Boxed: completion runs nested inside lock waits that roll other transactions back, and its
    // future is large (a debug build's test thread overflowed its stack).
    Box::pin(complete_items(
        inner,
        tx_id,
        items,
        requests,
        decided,
        trust_memory,
    ))
    .await
}

#[instrument(level = "debug", name = "complete", skip_all, fields(tx = %tx_id, state = %decided, items = items.len()))]
async fn complete_items(
    inner: &Inner,
    tx_id: &TxId,
    items: &mut Items,
    requests: &[Request],
    decided: TxState,
    trust_memory: bool,
) -> Result<()> {
    let _timer = crate::metrics::PhaseTimer::start(crate::metrics::SETTLE);
    let committed = decided == TxState::Committed;
    let c = &inner.client;
    let mut keys: Vec<ItemRef> = items.keys().cloned().collect();
    let mut known: HashMap<ItemRef, Observed> = HashMap::new();
    // Waiting in ticket order: every unlock carries the item's queue merged with the waiters
    // registered in the record (read now, after the decision: none lands later), from the items
    // as read (the queue an item carries is not in this coordinator's memory of a batched lock).
    let queues = inner.settings.queues();
    let (own_ticket, registered) = if queues {
        record::load_registrations(c, &inner.tx_table, tx_id).await?
    } else {
        (None, Default::default())
    };
    if trust_memory && !queues {
        for k in &keys {
            if let Some(l) = &items[k].lock {
                known.insert(k.clone(), l.as_observed(tx_id));
            }
        }
    }
    // Items whose write rolled forward DynamoDB refused (its condition, or the write itself,
    // which the library judged DynamoDB would take), with what DynamoDB said: left locked, not
    // retried, so that the others settle.
    let mut refused: BTreeMap<ItemRef, String> = BTreeMap::new();
    for _round in 0..PROTOCOL_ATTEMPTS {
        if keys.is_empty() {
            break;
        }
        // Read the items whose state we do not know.
        let unknown: Vec<(String, Item)> = keys
            .iter()
            .filter(|k| !known.contains_key(*k))
            .map(|k| (items[k].table.clone(), items[k].key.clone()))
            .collect();
        if !unknown.is_empty() {
            for (table, item) in ddb::batch_get(c, &unknown).await? {
                let schema = inner.schema(&table).await?;
                let key = item_lock::key_of(&schema, &item);
                known.insert(ItemRef::new(&table, &key), Observed::of(Some(&item)));
            }
            for k in &keys {
                known.entry(k.clone()).or_insert_with(|| Observed::of(None));
            }
        }
        let mut writes = Vec::new();
        let mut owners = Vec::new();
        // Items seen to change under us this round: settled next round, from what was read.
        let mut moved: Vec<ItemRef> = Vec::new();
        // The marks of the writes rolled forward this round.
        let mut forwarded: HashMap<ItemRef, usize> = HashMap::new();
        for k in &keys {
            let e = &items[k];
            let obs = &known[k];
            let table_image = match (
                &obs.image_ref,
                committed,
                obs.applied && obs.locked_by(tx_id),
            ) {
                (Some(id), false, true) => {
                    let img = item_lock::load_table_image(c, &inner.image_table, id).await?;
                    if img.is_none() {
                        // Another completer may have restored the item and deleted its image
                        // since we read it: finishing what someone else finished is success.
                        // Only if the item still carries this very lock is the image missing.
                        let raw = ddb::batch_get(c, &[(e.table.clone(), e.key.clone())]).await?;
                        let now = Observed::of(raw.first().map(|(_, i)| i));
                        let same_lock = now.locked_by(tx_id)
                            && now.applied
                            && now.image_ref == obs.image_ref
                            && now.stamp == obs.stamp;
                        if !same_lock {
                            known.insert(k.clone(), now);
                            moved.push(k.clone());
                            continue;
                        }
                    }
                    img
                }
                _ => None,
            };
            // A write rolled forward past the commit is applied now, in the write that unlocks.
            let forward = committed && obs.locked_by(tx_id) && !obs.applied && obs.roll.is_some();
            let write = if forward {
                let Some(w) = e.write.filter(|w| Some(*w) == obs.roll) else {
                    return Err(Error::invariant(format!(
                        "an item of {} locked by {tx_id} rolls forward request {:?}, not its write",
                        e.table, obs.roll
                    )));
                };
                let schema = inner.schema(&e.table).await?;
                forwarded.insert(k.clone(), w);
                Some(item_lock::roll_forward_write(
                    &requests[w],
                    obs,
                    &schema,
                    tx_id,
                )?)
            } else {
                item_lock::settle_write(
                    committed,
                    e.op(requests),
                    &e.table,
                    &e.key,
                    obs,
                    tx_id,
                    table_image.as_ref(),
                )?
            };
            if let Some(mut w) = write {
                if queues {
                    let item = (e.table.as_str(), &e.key);
                    item_lock::queue::carry_merged(
                        &mut w,
                        &obs.queue,
                        &registered,
                        item,
                        own_ticket,
                    );
                }
                writes.push(w);
                owners.push(Some(k.clone()));
                // The item's images-table row (the one it points to, or one saved for an apply
                // that never happened) goes in the same request: settled means no row left.
                let image = if obs.applied {
                    obs.image_ref.clone()
                } else {
                    e.write.and_then(|w| {
                        item_lock::unapplied_image_id(
                            tx_id,
                            &requests[w],
                            obs.transient,
                            Some(&obs.user),
                            obs.stamp.as_deref(),
                        )
                    })
                };
                if let Some(id) = image {
                    writes.push(item_lock::image_delete_write(&inner.image_table, &id));
                    owners.push(Some(k.clone()));
                }
            }
        }
        if writes.is_empty() && moved.is_empty() {
            keys.clear(); // every item is settled (by us or by someone else)
            break;
        }
        // Items whose settle write failed are re-read (from the failure) and retried.
        let mut retry: Vec<ItemRef> = moved;
        if writes.is_empty() {
            keys = retry;
            continue;
        }
        if writes.len() == 1 {
            let k = owners[0].clone().expect("owner");
            match writes[0].send(c, None).await? {
                Written::Ok(_) => {}
                Written::ConditionFailed(found) => {
                    let now = Observed::of(found.as_ref());
                    if refused_condition(&forwarded, &k, &now, tx_id) {
                        refused.insert(k, "its condition failed".into());
                    } else {
                        known.insert(k.clone(), now);
                        retry.push(k);
                    }
                }
            }
        } else {
            let groups = group_items(writes, owners);
            let forwarded = &forwarded;
            let results: Vec<Result<Isolated>> = futures::stream::iter(groups)
                .map(|g| async move { send_isolating(c, g, forwarded).await })
                .buffer_unordered(inner.settings.concurrency.clamp(1, 8))
                .collect()
                .await;
            let mut sent = Vec::new();
            for r in results {
                let (outs, refusals) = r?;
                sent.extend(outs);
                for (k, said) in refusals {
                    refused.entry(k).or_insert(said);
                }
            }
            for (os, out) in sent {
                if let Transacted::Cancelled(reasons) = out {
                    for (k, reason) in os.into_iter().zip(reasons) {
                        let k = k.expect("owner");
                        if reason.is_condition_failed() {
                            let now = Observed::of(reason.item.as_ref());
                            if refused_condition(forwarded, &k, &now, tx_id) {
                                refused
                                    .entry(k)
                                    .or_insert_with(|| "its condition failed".into());
                                continue;
                            }
                            known.insert(k.clone(), now);
                        } else if !reason.is_ok() && !reason.is_transient() {
                            if !forwarded.contains_key(&k) {
                                return Err(cancelled_error(&reason));
                            }
                            refused.entry(k).or_insert_with(|| {
                                let said = reason.message.clone().unwrap_or_default();
                                format!("{}: {said}", reason.code)
                            });
                            continue;
                        }
                        // Actions that were fine are retried too: the batch did nothing.
                        if !retry.contains(&k) && !refused.contains_key(&k) {
                            retry.push(k);
                        }
                    }
                }
            }
        }
        keys = retry;
        if !keys.is_empty() {
            crate::settings::backoff(&inner.settings, 0).await;
        }
    }
    if let Some((k, said)) = refused.first_key_value() {
        let e = &items[k];
        return Err(Error::invariant(format!(
            "DynamoDB refused the write of committed transaction {tx_id} to an item of table {} \
             ({said}), which the library judged it would take when it rolled the write forward \
             past the commit: the item stays locked (see docs/OPERATIONS.md, A write rolled \
             forward that DynamoDB refused)",
            e.table
        )));
    }
    // Never delete an image or finalize while an item may still need settling (the model
    // check's "finalized means settled"): give up for now; completing again finishes the job.
    if let Some(k) = keys.first() {
        let e = &items[k];
        return Err(Error::ItemLocked {
            table: e.table.clone(),
            key: e.key.clone(),
            owner: tx_id.clone(),
        });
    }
    record::finalize(
        c,
        &inner.tx_table,
        tx_id,
        decided,
        inner.settings.record_ttl_secs(),
    )
    .await?;
    for e in items.values_mut() {
        e.lock = None;
    }
    debug!(tx = %tx_id, state = %decided, "finalized");
    Ok(())
}

/// Releases the locks this handle holds whose write was never applied (after the record
/// vanished: only locks taken late can remain).
pub(crate) async fn release_unapplied_locks(
    inner: &Inner,
    tx_id: &TxId,
    items: &mut Items,
) -> Result<()> {
    for e in items.values_mut() {
        release_unapplied_lock(inner, tx_id, e).await?;
    }
    Ok(())
}

/// Releases the locks of a transaction that has no record and never will (taken without one,
/// `Settings::record_on_demand`, and rolled back by its own handle): as
/// [`release_unapplied_locks`], each release also marking the item with the transaction's id for
/// the change feed where its writes would be marked (`_TxM`), which tells the feed that this
/// write is the transaction's last on the item and that no record will say more.
pub(crate) async fn release_without_record(
    inner: &Inner,
    tx_id: &TxId,
    items: &mut Items,
) -> Result<()> {
    for e in items.values_mut() {
        release_unapplied(inner, tx_id, e, true).await?;
    }
    Ok(())
}

/// [`release_unapplied_locks`] for one item: forgets the lock `e` holds and, unless it is applied,
/// releases it (conditional on `tx_id` owning it and on its not being applied).
pub(crate) async fn release_unapplied_lock(
    inner: &Inner,
    tx_id: &TxId,
    e: &mut super::Entry,
) -> Result<()> {
    release_unapplied(inner, tx_id, e, false).await
}

/// [`release_unapplied_lock`], the release marked for the change feed with `marked` (see
/// [`release_without_record`]).
async fn release_unapplied(
    inner: &Inner,
    tx_id: &TxId,
    e: &mut super::Entry,
    marked: bool,
) -> Result<()> {
    if let Some(l) = e.lock.take()
        && !l.applied
    {
        let mut w = item_lock::release_write(&e.table, &e.key, l.transient, false, tx_id);
        if marked && inner.marks_writes_to(&e.table) {
            item_lock::mark_made(&mut w, tx_id);
        }
        w.send(&inner.client, None).await?;
    }
    Ok(())
}

/// Whether a write rolled forward this round (`forwarded`) failed on the user's condition: the
/// item still carries the very mark the write was conditional on (our lock, unapplied, `_TxU` =
/// the write), so the rest of its condition, the user's, is what failed.
fn refused_condition(
    forwarded: &HashMap<ItemRef, usize>,
    k: &ItemRef,
    now: &Observed,
    tx_id: &TxId,
) -> bool {
    forwarded
        .get(k)
        .is_some_and(|&w| now.locked_by(tx_id) && !now.applied && now.roll == Some(w))
}
