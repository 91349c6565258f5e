//! The places a unit of work took in items' queues (`Settings::wait_in_ticket_order`), so that
//! one that gives up for good takes them back rather than hold up the transactions behind it until
//! its entries expire (`Settings::queue_ttl`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use tracing::debug;

use crate::error::Item;
use crate::item_lock::queue;
use crate::keys::ItemRef;
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

    /// Takes every entry back (best effort, concurrently, each conditional on its item unlocked
    /// and its queue as read: see [`queue::leave`]). An entry on a locked item, or one a failed
    /// request left, expires after `queue_ttl`.
    ///
    /// Cancel safety: dropped midway, some entries stay until they expire, as without it.
    pub(crate) async fn leave(&self, inner: &Inner) {
        let places: Vec<Place> = std::mem::take(&mut *self.0.lock().expect("places poisoned"))
            .into_values()
            .collect();
        if places.is_empty() {
            return;
        }
        let client = &inner.client;
        futures::stream::iter(places)
            .for_each_concurrent(
                inner.settings.concurrency.max(1),
                |(table, key, ticket)| async move {
                    let left = queue::leave(client, &table, &key, ticket).await;
                    debug!(table, ticket, ?left, "left the item's queue");
                },
            )
            .await;
    }
}
