//! The oldest waiter's mark (`Settings::mark_oldest_waiter`), a waiter's side: it marks the item
//! it waits for when no older live mark is there, and looks at it often while it is the oldest.
//! See [`item_lock::head`](crate::item_lock::head) and docs/PROTOCOL.md "The oldest waiter's
//! mark".

use tracing::debug;

use crate::error::Item;
use crate::item_lock::head::{self, HeadMark};
use crate::keys::KeySchema;

use super::Transaction;

impl Transaction {
    /// Whether the mark `found` is this transaction's (with the ticket it contends with).
    pub(super) fn is_marked_head(&self, found: Option<HeadMark>) -> bool {
        found.is_some_and(|h| Some(h.ticket) == self.known_ticket())
    }

    /// Waiting at `table`/`key`, whose last look found the mark `found`: writes this
    /// transaction's mark (its ticket `mine`) when no older live one is there, or renews its own.
    /// The mark the item carries for this transaction, as far as this waiter knows, if any: it
    /// is the oldest waiter that marked the item, and the next lock of the item is its own (or an
    /// older newcomer's); its next look is conditional on that very mark. Best effort: a mark that
    /// fails (an older one landed first, the item went, a refused request) is left to the next
    /// look. `maybe_marked` is set when the item may carry this waiter's mark even though none
    /// is returned: the write failed ambiguously (it may have landed), so a waiter that stops
    /// waiting without another look still takes it off.
    pub(super) async fn mark_as_waiter(
        &self,
        table: &str,
        key: &Item,
        schema: &KeySchema,
        found: Option<HeadMark>,
        mine: u64,
        maybe_marked: &mut bool,
    ) -> Option<HeadMark> {
        let now = crate::ddb::now_millis();
        let ttl = self.inner.settings.queue_ttl.as_millis() as u64;
        if !HeadMark::should_mark(found, mine, now, ttl) {
            return found.filter(|h| h.ticket == mine);
        }
        let c = &self.inner.client;
        let written = HeadMark {
            ticket: mine,
            expiry: now + ttl,
        };
        match head::mark(c, table, key, schema, &self.id, written, now).await {
            Ok(landed) => {
                debug!(tx = %self.id, table, mine, landed, "marked the item as its oldest waiter");
                landed.then_some(written)
            }
            Err(e) => {
                debug!(tx = %self.id, table, error = %e, "marking the item failed");
                if matches!(
                    e,
                    crate::Error::DynamoDb {
                        ambiguous: true,
                        ..
                    }
                ) {
                    *maybe_marked = true;
                }
                None
            }
        }
    }

    /// Takes this transaction's mark off `table`/`key`, if the item still carries it: a waiter
    /// that stops waiting without the lock. Best effort: a mark left behind expires.
    pub(super) async fn unmark(&self, table: &str, key: &Item) {
        let Some(mine) = self.known_ticket() else {
            return;
        };
        let taken = head::unmark(&self.inner.client, table, key, mine).await;
        debug!(tx = %self.id, table, ?taken, "took its mark off the item");
    }
}
