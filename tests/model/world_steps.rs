//! The world's steps (contenders, the sweeper, other completers): settle an item, delete an image,
//! finalize.

use super::*;

impl ProtocolModel {
    pub(crate) fn settle(&self, s: &mut State, tx: Tx, i: usize) -> bool {
        let t = tx as usize;
        let Some(r) = s.records[t] else {
            return false;
        };
        if r.state == TxState::Pending || s.items[i].owner != Some(tx) {
            return false;
        }
        let Some(op) = self.recorded_op(tx, i, r.requests) else {
            // A lock the decided record does not name: a read's lock whose request was never
            // recorded (`LockThenRecord`). Unapplied, it is released like a late lock; an applied
            // one is reported by the invariant "locks are covered".
            if s.items[i].applied != Applied::No {
                return false;
            }
            Self::release(&mut s.items[i]);
            return true;
        };
        let committed = r.state == TxState::Committed;
        let image = s.images[t][i];
        let it = &mut s.items[i];
        let is_delete = op == Op::Delete || it.applied == Applied::DeleteMark;
        let forward = it.roll
            || (self.cfg.bug == Some(Bug::RollForwardIgnoresMark)
                && self.plan(tx).roll_forward
                && op.is_write());
        if committed && it.applied == Applied::No && forward {
            // `roll_forward_write`: the write applied by the write that unlocks, conditional on
            // `_TxId = me AND attribute_not_exists(_TxA) AND _TxU = <its index>`.
            *it = Item::unlocked(op.apply(it.data));
            s.rolled_forward = true;
        } else if it.applied == Applied::No {
            // A read lock, a write never applied, or a late lock: release.
            Self::release(it);
        } else if committed {
            if is_delete {
                *it = Item::unlocked(None);
            } else {
                Self::clear_lock(it);
            }
        } else if is_delete || self.cfg.bug == Some(Bug::ReleaseIgnoresApplied) {
            Self::release(it);
        } else if it.transient {
            *it = Item::unlocked(None);
        } else if let Some(img) = it.image {
            // Restore the image: a PutItem conditional on our lock, which also unlocks.
            *it = Item::unlocked(Some(img));
        } else if it.image_ref {
            match image {
                Some(img) => *it = Item::unlocked(Some(img)),
                None => return false, // `settle_write` fails: the image is missing
            }
        } else {
            return false;
        }
        true
    }

    /// The record was just decided: every lock of the transaction now on an item was taken before
    /// the decision, so a completer (which reads the items the record names after the decision)
    /// will find it — unless the record does not name it (a read's lock whose request was never
    /// recorded): that one is left to whoever meets it, like a late lock.
    pub(crate) fn mark_decided(&self, s: &mut State, tx: Tx) {
        let requests = s.records[tx as usize].map_or(0, |r| r.requests);
        for i in 0..s.items.len() {
            if s.items[i].owner == Some(tx) {
                s.items[i].late = !self.covered(tx, i, requests);
            }
        }
    }

    pub(crate) fn delete_image(&self, s: &mut State, tx: Tx, i: usize) -> bool {
        let t = tx as usize;
        if s.images[t][i].is_none() {
            return false;
        }
        // `complete` deletes the images of the items it settled, the sweeper those of finalized or
        // vanished transactions: either way no lock of the transaction taken before its decision
        // is left on the item (a late lock is never applied, so its image is never needed).
        let it = &s.items[i];
        let settled = it.owner != Some(tx) || it.late;
        let allowed = match s.records[t] {
            None => settled,
            Some(r) if r.state != TxState::Pending => {
                settled || self.cfg.bug == Some(Bug::DeleteImageBeforeSettle)
            }
            Some(_) => false,
        };
        if allowed {
            s.images[t][i] = None;
        }
        allowed
    }

    pub(crate) fn finalize(&self, s: &mut State, tx: Tx) -> bool {
        let t = tx as usize;
        let Some(r) = s.records[t] else {
            return false;
        };
        // `complete` read every item after the decision and settled what it found locked; only
        // locks taken later (late locks, never applied) can remain.
        let settled = (0..s.items.len()).all(|i| {
            !Self::unsettled_lock(s, tx, i) && (s.items[i].owner != Some(tx) || s.items[i].late)
        });
        if r.state == TxState::Pending
            || r.finalized
            || !(settled || self.cfg.bug == Some(Bug::FinalizeBeforeSettle))
        {
            return false;
        }
        s.records[t] = Some(Record {
            finalized: true,
            ..r
        });
        true
    }
}
