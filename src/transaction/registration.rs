//! Waiting in ticket order (`Settings::wait_in_ticket_order`): a waiter's place with the holder
//! it waits for, and the queue part of its lock attempts.

use tracing::debug;

use crate::TxId;
use crate::error::Item;
use crate::item_lock;
use crate::record;

use super::Transaction;

impl Transaction {
    /// Waiting in ticket order: takes a place for `table`/`key` in the record of its pending
    /// `holder` (at the first wait on it, then renewed every third of the entry's life), unless
    /// the item carries this waiter's entry (`own_entry`, its expiry as the last attempt showed it)
    /// with life enough left: the holder's unlock keeps it, and a registration would only write the
    /// holder's record (cancelling its one-request commit) for nothing. `registered`: the holder
    /// last registered with, and when. False when the holder was found decided since it was
    /// judged: nothing registered, and the item is free or soon is, so the caller looks again at
    /// once, before a newcomer that finds no queue on it takes it. Without the setting or a
    /// recorded ticket, nothing is sent.
    pub(super) async fn register_with(
        &self,
        holder: &TxId,
        table: &str,
        key: &Item,
        own_entry: Option<u64>,
        registered: &mut Option<(TxId, tokio::time::Instant)>,
    ) -> bool {
        let settings = &self.inner.settings;
        let Some(&mine) = self.ticket_recorded.get().filter(|_| settings.queues()) else {
            return true;
        };
        let (now, ttl_ms) = (
            crate::ddb::now_millis(),
            settings.queue_ttl.as_millis() as u64,
        );
        if !item_lock::queue::needs_renewal(own_entry, now, ttl_ms) {
            return true;
        }
        let due = registered
            .as_ref()
            .is_none_or(|(h, at)| h != holder || at.elapsed() >= settings.queue_ttl / 3);
        if !due {
            return true;
        }
        let expiry = now + ttl_ms;
        let item = item_lock::queue::item_hash(table, key);
        let (c, tx_table) = (&self.inner.client, &self.inner.tx_table);
        let landed = record::register_waiter(c, tx_table, holder, &item, mine, expiry).await;
        debug!(tx = %self.id, %holder, ticket = mine, ?landed, "registered with the holder");
        match landed {
            Ok(true) => {
                *registered = Some((holder.clone(), tokio::time::Instant::now()));
                self.places.took(table, key, mine);
                true
            }
            Ok(false) => {
                *registered = None;
                false
            }
            // Registering again is harmless: the next wait tries again.
            Err(e) => {
                debug!(tx = %self.id, error = %e, "registration failed");
                true
            }
        }
    }

    /// What this handle's lock attempts respect besides the lock (see [`item_lock::Guard`]): with
    /// `Settings::wait_in_ticket_order`, the item's queue, with its recorded ticket if it has one
    /// yet; with `Settings::mark_oldest_waiter`, the oldest waiter's mark, with the ticket it
    /// contends with (recorded, or the one its record will hold).
    pub(super) fn lock_guard(&self) -> item_lock::Guard {
        let s = &self.inner.settings;
        if s.queues() {
            item_lock::Guard::Queue(self.ticket_recorded.get().copied())
        } else if s.head_marks() {
            item_lock::Guard::Head(self.known_ticket(), Default::default())
        } else {
            item_lock::Guard::Free
        }
    }
}
