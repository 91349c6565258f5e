//! Locks taken out of key order: what a lock attempt on an item below (table, then key) one this
//! handle holds may do instead of waiting there, where its wait may close a cycle through the
//! items it holds.
//!
//! - `run`'s first attempt gives itself up (`Settings::yield_out_of_order`), and its retry relocks
//!   what it read in key order.
//! - Any transaction whose locks above the item are all held only for reading
//!   (`Settings::reorder_held_reads`) releases them (keeping its turn there only with
//!   `Settings::reorder_keeps_turn`), waits for the item, then takes them back in key order and
//!   checks that each still reads as it did: the reads its caller already has stay true at the
//!   moment the transaction holds every lock, so nothing is given up unless one changed. See
//!   docs/PROTOCOL.md "Reads taken back in key order".
//!
//! Both decide at the first contention, before the waiter's mark; [`Transaction::gives_up`] also
//! holds `run`'s first attempt's patience behind retries (`Settings::first_attempt_patience`).

use tracing::debug;

use crate::contention::Resolution;
use crate::error::{Error, Item, Result};
use crate::item_lock::{Existence, LockInfo};
use crate::keys::ItemRef;

use super::{State, Transaction};

/// Where a lock attempt stands in key order among the locks its handle holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Placement {
    /// No lock held above the item (or the caller does not care).
    InOrder,
    /// Below a held lock: `run`'s first attempt may give itself up there.
    BelowHeld,
    /// Below held locks that are all reads the caller may release and take back
    /// ([`Transaction::lock_in_key_order`]): the attempt gives up at the first contention.
    Reorderable,
    /// Taken after those reads were released, by a handle holding no other lock: it waits as a
    /// handle holding nothing (a released read keeps at most its turn, which older transactions
    /// pass), not as one counting its released reads as held, which would give a first attempt up
    /// at once behind a retry.
    Released,
}

impl Transaction {
    /// Where a lock of `r`'s item stands (see [`Placement`]).
    pub(super) fn order_of(&self, st: &State, r: &ItemRef) -> Placement {
        if !st.items.iter().any(|(k, e)| e.lock.is_some() && k > r) {
            Placement::InOrder
        } else if self.releasable_above(st, r).is_some() {
            Placement::Reorderable
        } else {
            Placement::BelowHeld
        }
    }

    /// The held items above `r`, when `Settings::reorder_held_reads` may release them all: each
    /// an existing item locked for a read only (no write asked, nothing applied), under a record
    /// this handle knows (a lock without record stands for the record that is not there yet), and
    /// items do not keep queues (`Settings::wait_in_ticket_order`: a release there writes the
    /// item's queue).
    fn releasable_above(&self, st: &State, r: &ItemRef) -> Option<Vec<ItemRef>> {
        let s = &self.inner.settings;
        if !s.reorder_held_reads
            || s.queues()
            || st.meta.is_none()
            || st.record_in_doubt
            || st.unrecorded_lock_sent.is_some()
        {
            return None;
        }
        let mut above = Vec::new();
        for (k, e) in st.items.range(r.clone()..).filter(|(k, _)| *k > r) {
            let Some(l) = &e.lock else { continue };
            if e.write.is_some() || l.transient || l.applied || st.unfinished.contains(k) {
                return None;
            }
            above.push(k.clone());
        }
        (!above.is_empty()).then_some(above)
    }

    /// Takes `r`'s item after a lock attempt below held reads gave up ([`Placement::Reorderable`]):
    /// releases the reads above it, waits for it in key order, then takes them back in key order,
    /// each checked against what it read before. One that changed meanwhile, or any failure once
    /// a read is released, rolls the transaction back (`RolledBack`: `run` retries it): its
    /// caller may hold a value the transaction can no longer vouch for. Except in `run`, when
    /// every lock was taken back and nothing is written: the call then returns `RolledBack`
    /// with the transaction still pending and every lock held, and `run` runs its work again in
    /// it (`State::restart`), as a retry that has relocked its reads would. Until every read is
    /// taken back, the released ones are kept in `st.released`, which refuses a commit.
    pub(super) async fn lock_in_key_order(
        &self,
        st: &mut State,
        r: &ItemRef,
        first: Existence,
    ) -> Result<LockInfo> {
        let Some(above) = self.releasable_above(st, r) else {
            return Err(Error::invariant("a reorder without reads to release"));
        };
        debug!(tx = %self.id, released = above.len(), "out of key order: releasing reads, taking them back in order");
        crate::metrics::contention_yield();
        let failed = match self.relock_in_order(st, r, first, &above).await {
            Ok((lock, false)) => {
                st.released.clear();
                return Ok(lock);
            }
            // An older transaction may have rolled this one back while it waited, which the
            // looks that took the items do not learn: the work would run again for nothing.
            Ok((_, true)) if self.may_restart(st) && !self.decided_meanwhile(true).await? => {
                debug!(tx = %self.id, "a read taken back in key order changed; the work runs again holding every lock");
                st.released.clear();
                st.restart = true;
                return Err(self.rolled_back());
            }
            Ok((_, true)) => self.rolled_back(),
            Err(e) => e,
        };
        debug!(tx = %self.id, error = %failed, "reads taken back in key order failed; rolling back");
        st.rollback_cause = Some(crate::metrics::READ_CHANGED);
        self.rollback_locked(st).await?;
        // The turns kept at the released items (`Settings::reorder_keeps_turn`), where no lock
        // took them since.
        let released: Vec<ItemRef> = std::mem::take(&mut st.released).into_keys().collect();
        if self.inner.settings.reorder_keeps_turn {
            for k in released {
                if let Some(e) = st.items.get(&k) {
                    self.unmark(&e.table, &e.key).await;
                }
            }
        }
        Err(match failed {
            e @ Error::RolledBack { .. } => e,
            _ => self.rolled_back(),
        })
    }

    /// Whether `run` may run its work again in this transaction instead of a new attempt: every
    /// item it asked for is locked, none written or applied, its record known and not in doubt.
    /// Its work then reads every item again under locks it holds, so what it read before counts
    /// for nothing.
    fn may_restart(&self, st: &State) -> bool {
        self.in_run
            && st.meta.is_some()
            && !st.record_in_doubt
            && st.unfinished.is_empty()
            && st.items.values().all(|e| {
                e.write.is_none() && e.lock.as_ref().is_some_and(|l| !l.applied && !l.transient)
            })
    }

    /// Releases the reads `above` `r`, waits for `r`'s item, then takes them back in key order:
    /// the lock of `r`, and whether one of them changed since it was read (each is held again
    /// either way).
    async fn relock_in_order(
        &self,
        st: &mut State,
        r: &ItemRef,
        first: Existence,
        above: &[ItemRef],
    ) -> Result<(LockInfo, bool)> {
        for k in above {
            let mut e = st.items[k].clone();
            let read: Option<Item> = e.lock.as_ref().and_then(|l| l.current.clone());
            st.released.insert(k.clone(), read);
            if !self.release_keeping_turn(&e.table, &e.key).await? {
                crate::settle::release_unapplied_lock(&self.inner, &self.id, &mut e).await?;
            }
            st.items.get_mut(k).expect("entry exists").lock = None;
            self.inner.notices.let_go(self.id.as_str(), k);
        }
        let (table, key) = (st.items[r].table.clone(), st.items[r].key.clone());
        let order = if st.items.values().any(|e| e.lock.is_some()) {
            Placement::InOrder
        } else {
            Placement::Released
        };
        let lock = Box::pin(self.lock_one(&table, &key, first, false, order)).await?;
        st.items.get_mut(r).expect("entry exists").lock = Some(lock.clone());
        let mut changed = false;
        for k in above {
            let (table, key) = (st.items[k].table.clone(), st.items[k].key.clone());
            let again = Box::pin(self.lock_one(
                &table,
                &key,
                Existence::Present,
                false,
                Placement::InOrder,
            ))
            .await?;
            st.items.get_mut(k).expect("entry exists").lock = Some(again.clone());
            if again.transient {
                return Err(self.rolled_back());
            }
            if again.current != st.released[k] {
                debug!(tx = %self.id, table, "a read taken back in key order changed meanwhile");
                changed = true;
            }
        }
        Ok((lock, changed))
    }

    /// With `Settings::reorder_keeps_turn`, releases this handle's read lock on `table`/`key`
    /// leaving its mark there (the oldest waiter's, `Settings::mark_oldest_waiter`), so that no
    /// younger transaction takes the item before this one takes it back: true when that landed.
    /// False (nothing written) without the setting, marks or a ticket, or when an older live mark
    /// is there: the caller then releases the lock as any unlock.
    async fn release_keeping_turn(&self, table: &str, key: &Item) -> Result<bool> {
        let settings = &self.inner.settings;
        let Some(mine) = self
            .known_ticket()
            .filter(|_| settings.reorder_keeps_turn && settings.head_marks())
        else {
            return Ok(false);
        };
        let now = crate::ddb::now_millis();
        let mark = crate::item_lock::head::HeadMark {
            ticket: mine,
            expiry: now + self.inner.settings.queue_ttl.as_millis() as u64,
        };
        let w = crate::item_lock::head::release_marking(table, key, &self.id, mark, now);
        let landed = matches!(
            w.send(&self.inner.client, None).await?,
            crate::ddb::Written::Ok(_)
        );
        debug!(tx = %self.id, table, landed, "released a read keeping its turn at the item");
        Ok(landed)
    }

    /// Whether `run`'s first attempt gives its attempt up (`run` retries it, in the retries'
    /// class) instead of waiting as `resolution` says; also true at once, for any transaction, when
    /// its caller takes back the reads held above the item (`Placement::Reorderable`):
    /// - out of key order (`Settings::yield_out_of_order`): it meets contention on an item below
    ///   one it holds, where it may close a cycle of waits through the items it holds; its retry
    ///   relocks what it read in key order, where no such cycle forms;
    /// - past its patience (`Settings::first_attempt_patience`, since `waiting_since`), holding
    ///   nothing else, behind a retry drawn after it: its retry goes ahead of the retries younger
    ///   than its unit of work instead of behind every one that comes meanwhile.
    pub(super) fn gives_up(
        &self,
        resolution: Resolution,
        holds_others: bool,
        order: Placement,
        waiting_since: tokio::time::Instant,
    ) -> bool {
        let settings = &self.inner.settings;
        let contended = matches!(resolution, Resolution::Wait { .. } | Resolution::Grace);
        if order == Placement::Reorderable && contended {
            return true;
        }
        if !self.in_run || self.retry {
            return false;
        }
        let out_of_order =
            settings.yield_out_of_order && order == Placement::BelowHeld && contended;
        let past_patience = match resolution {
            Resolution::Wait { on, .. } => {
                !holds_others
                    && waiting_since.elapsed() >= settings.first_attempt_patience
                    && self
                        .known_ticket()
                        .is_some_and(|mine| crate::ticket::retry_drawn_after(on, mine))
            }
            _ => false,
        };
        if out_of_order {
            debug!(tx = %self.id, "a first attempt meets contention out of key order; yielding");
        } else if past_patience {
            debug!(tx = %self.id, "a first attempt past its patience yields to a retry");
        }
        let gives_up = out_of_order || past_patience;
        if gives_up {
            crate::metrics::contention_yield();
        }
        gives_up
    }
}
