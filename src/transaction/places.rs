//! The places a unit of work took in items' queues (`Settings::wait_in_ticket_order`), so that
//! one that gives up for good takes them back rather than hold up the transactions behind it until
//! its entries expire (`Settings::queue_ttl`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use tracing::debug;

use crate::error::{Item, Result};
use crate::item_lock::queue;
use crate::keys::ItemRef;
use crate::record;
use crate::settings::Inner;

/// The items a unit of work took a place at (joined a free item's queue, or registered with its
/// holder) and has not locked since, each with the ticket of its entry. Shared by every attempt of
/// one unit of work, which keep one ticket and so one place (but for the class: `run` takes the
/// first attempt's places back before its first retry).
#[derive(Debug, Clone, Default)]
pub(crate) struct Places(Arc<Mutex<BTreeMap<ItemRef, Place>>>);

/// An item's table and key, and the ticket of the entry taken there.
type Place = (String, Item, u64);

impl Places {
    /// A place taken at `table`/`key` with `ticket`.
    pub(crate) fn took(&self, table: &str, key: &Item, ticket: u64) {
        let r = ItemRef::new(table, key);
        self.0
            .lock()
            .expect("places poisoned")
            .insert(r, (table.to_string(), key.clone(), ticket));
    }

    /// The item was locked: its unlock drops the entry.
    pub(crate) fn locked(&self, table: &str, key: &Item) {
        let mut places = self.0.lock().expect("places poisoned");
        if !places.is_empty() {
            places.remove(&ItemRef::new(table, key));
        }
    }

    /// Takes every entry back (best effort, concurrently): off its item when the item is free
    /// (conditional on it unlocked and its queue as read: see [`queue::leave`]), or withdrawn in
    /// the record of the transaction that holds it (see [`record::withdraw_waiter`]), whose unlock
    /// then leaves it out. An entry whose holder was decided meanwhile is looked for again, a few
    /// times, on the item its completer frees; one that a failed request left expires after
    /// `queue_ttl`.
    ///
    /// Cancel safety: dropped midway, some entries stay until they expire, as without it.
    pub(crate) async fn leave(&self, inner: &Inner) {
        let places: Vec<Place> = std::mem::take(&mut *self.0.lock().expect("places poisoned"))
            .into_values()
            .collect();
        if places.is_empty() {
            return;
        }
        futures::stream::iter(places)
            .for_each_concurrent(
                inner.settings.concurrency.max(1),
                |(table, key, ticket)| async move {
                    let left = take_back(inner, &table, &key, ticket).await;
                    debug!(table, ticket, ?left, "left the item's queue");
                },
            )
            .await;
    }
}

/// How many times [`take_back`] looks at an item whose holder was decided under it.
const TAKE_BACK_LOOKS: u32 = 3;

/// Takes `ticket`'s entry on `table`/`key` back: true when it was taken off the free item or
/// withdrawn from its holder's record, false when there was none to take (or it is left to
/// expire).
async fn take_back(inner: &Inner, table: &str, key: &Item, ticket: u64) -> Result<bool> {
    let client = &inner.client;
    for look in 0..TAKE_BACK_LOOKS {
        match queue::leave(client, table, key, ticket).await? {
            queue::Left::Off => return Ok(true),
            queue::Left::Nothing => return Ok(false),
            queue::Left::Locked { owner, carried } => {
                let item = queue::item_hash(table, key);
                // Not carried by the item, the entry can only be a registration with the owner.
                let registered_only = !carried;
                let tx_table = &inner.tx_table;
                if record::withdraw_waiter(client, tx_table, &owner, &item, ticket, registered_only)
                    .await?
                {
                    return Ok(true);
                }
                // The owner was decided (its completer carries the entry to the item it frees),
                // or holds no registration of ours.
                crate::settings::backoff(&inner.settings, look + 1).await;
            }
        }
    }
    Ok(false)
}
