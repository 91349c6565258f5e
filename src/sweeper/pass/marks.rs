//! The sweep of waiters' places on items: marks, the lines behind them and queues, whose
//! waiters died or stopped waiting on items that no lock takes again.

use aws_sdk_dynamodb::types::AttributeValue;
use tracing::debug;

use super::Pass;
use crate::error::Item;
use crate::item_lock;
use crate::sweeper::millis;

impl Pass<'_> {
    /// A waiter's mark found on an item: taken off (conditional on that very mark) when it no
    /// longer counts or was written `rollback_after` ago. A waiter that dies while it waits
    /// leaves its mark, which the next lock of the item takes off; this is for the items no
    /// lock takes again.
    pub(super) async fn mark(&self, table: &str, key: &Item, mark: item_lock::head::HeadMark) {
        let ttl = millis(self.mgr.inner.settings.queue_ttl);
        let now = crate::ddb::now_millis();
        if !item_lock::head::stale(mark, now, ttl, millis(self.opts.rollback_after)) {
            return;
        }
        if self.opts.dry_run {
            self.note(|r| r.marks_removed += 1);
            return;
        }
        match item_lock::head::take_off(self.client(), table, key, mark).await {
            Ok(true) => {
                debug!(
                    table,
                    ticket = mark.ticket,
                    "sweep: took a waiter's mark off an item"
                );
                self.note(|r| r.marks_removed += 1);
            }
            // Renewed, taken by a lock, or gone with the item meanwhile.
            Ok(false) => {}
            Err(e) => self.fail(None, table, &e),
        }
    }

    /// The line behind a mark found on an item (`seen` as the item carries it, `line` read from
    /// it): its entries that no longer count or were written `rollback_after` ago taken out (the
    /// whole line when none is left), conditional on the line as read. Counted with the marks:
    /// each entry is a waiter's place. A waiter that dies in the line leaves its entry, which the
    /// next lock that reads the line takes out; this is for the items no lock takes again.
    pub(super) async fn line(
        &self,
        table: &str,
        key: &Item,
        seen: &AttributeValue,
        line: item_lock::line::Line,
    ) {
        let ttl = millis(self.mgr.inner.settings.queue_ttl);
        let now = crate::ddb::now_millis();
        let stale: Vec<u64> = line
            .entries
            .iter()
            .filter(|&(&t, &e)| {
                let entry = item_lock::head::HeadMark {
                    ticket: t,
                    expiry: e,
                };
                item_lock::head::stale(entry, now, ttl, millis(self.opts.rollback_after))
            })
            .map(|(&t, _)| t)
            .collect();
        let whole = stale.len() == line.entries.len();
        if stale.is_empty() && !whole {
            return;
        }
        if self.opts.dry_run {
            self.note(|r| r.marks_removed += stale.len() as u64);
            return;
        }
        match item_lock::line::take_off_line(self.client(), table, key, seen, &stale, whole).await {
            Ok(true) => {
                debug!(
                    table,
                    entries = stale.len(),
                    "sweep: took stale entries out of the line behind a mark"
                );
                self.note(|r| r.marks_removed += stale.len() as u64);
            }
            // Changed by a waiter or a lock meanwhile.
            Ok(false) => {}
            Err(e) => self.fail(None, table, &e),
        }
    }

    /// The queue of an unlocked item: rewritten without its expired entries (conditional on the
    /// item still unlocked and its queue as read). A live waiter renews its entry well before it
    /// expires, so an expired one is a waiter's that died or stopped waiting. A locked item's
    /// queue is its holder's to write back: its unlock drops the expired entries.
    pub(super) async fn queue(&self, table: &str, key: &Item, item: &Item) {
        let was = item_lock::queue::ItemQueue::of(item);
        let now = crate::ddb::now_millis();
        let expired = was.entries.values().filter(|e| **e <= now).count() as u64;
        if expired == 0 {
            return;
        }
        if self.opts.dry_run {
            self.note(|r| r.queue_entries_removed += expired);
            return;
        }
        match item_lock::queue::rewrite(self.client(), table, key, &was, now, None).await {
            Ok(true) => {
                debug!(
                    table,
                    expired, "sweep: took expired queue entries off an item"
                );
                self.note(|r| r.queue_entries_removed += expired);
            }
            // Locked, rewritten or gone meanwhile.
            Ok(false) => {}
            Err(e) => self.fail(None, table, &e),
        }
    }
}
