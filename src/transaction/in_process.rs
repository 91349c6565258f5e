//! Waiting in process (docs/PROTOCOL.md "Handing the item over", *Waiting in process*): a waiter
//! whose item a transaction of its own manager holds waits for that holder here
//! ([`Notices::wait_while_held`](crate::item_lock::notice::Notices::wait_while_held)) instead of
//! looking at DynamoDB, which would only find the item held.

use crate::error::Item;
use crate::item_lock::line::Line;
use crate::keys::ItemRef;

use super::Transaction;

impl Transaction {
    /// Waits in process for the item `at` (its table and reference) while another transaction
    /// of this manager holds it, until `until`: the item as a holder told its handover, if it
    /// did (`told` is used up then). `marked`: this waiter's mark is on the item; `line`: the
    /// line behind the mark as its last look found it; `last_look`: how long its last look took.
    /// Untold, the caller's view of the line may be stale: its next lock is held to that view
    /// ([`LineStep::held_to_view`](crate::item_lock::line::LineStep::held_to_view)).
    ///
    /// Cancel safety: dropping it loses nothing that was not told yet, and sends nothing.
    pub(super) async fn wait_in_process(
        &self,
        at: (&str, &ItemRef),
        marked: bool,
        line: &Line,
        last_look: Option<std::time::Duration>,
        told: &mut Option<tokio::sync::oneshot::Receiver<Item>>,
        until: tokio::time::Instant,
    ) -> Option<Item> {
        let (table, here) = at;
        let notices = &self.inner.notices;
        let me = self.id.as_str();
        // Not next (a place behind another's in the line): a let-go wakes it to look only if no
        // transaction here takes the item within a look's time (the next in line's look most
        // often does), so that a let-go is not a look by every waiter.
        let behind_others = !marked
            && self
                .known_ticket()
                .is_some_and(|mine| line.ahead_of(mine, crate::ddb::now_millis()) > 0);
        tracing::debug!(tx = %self.id, table, marked, behind_others, "waiting in process");
        let mut notice;
        loop {
            notice = notices.wait_while_held(here, me, told, until).await;
            if notice.is_some() || !behind_others || tokio::time::Instant::now() >= until {
                break;
            }
            let pause = last_look.unwrap_or(self.inner.settings.backoff_base);
            let pause = tokio::time::sleep(pause.min(until - tokio::time::Instant::now()));
            notice = crate::item_lock::notice::sleep_unless_told(pause, told).await;
            if notice.is_some() || notices.held_by_other(here, me).is_none() {
                break;
            }
        }
        tracing::debug!(tx = %self.id, table, told = notice.is_some(), "waited in process");
        notice
    }
}
