//! The coordinator's steps of the batched locking commit (`Settings::batch_locks`): the record and
//! every lock in one TransactWriteItems, then the before-images read after the locks (only where
//! a phased apply needs them), and the naive variant's read before the locks.

use super::*;

impl ProtocolModel {
    /// One TransactWriteItems: `Put` of the record (`attribute_not_exists(_TxId)`, pending, every
    /// request) plus, per item, `SET _TxId, _TxD` conditional on `attribute_exists(<hash key>) AND
    /// attribute_not_exists(_TxId)`, with `ReturnValuesOnConditionCheckFailure = ALL_OLD`. All or
    /// nothing. When it is cancelled only because items are absent (the record's condition held,
    /// every item unlocked), it is sent once more with a placeholder lock (`SET _TxId, _TxD, _TxT`
    /// conditional on `attribute_not_exists(<hash key>)`) for each item absent then. `fresh`: a retry that DynamoDB does not recognise by its ClientRequestToken (our
    /// own new attempt, or the SDK's after the token's 10 minutes).
    pub(crate) fn batch_lock(&self, s: &mut State, k: Slot, lost: bool, fresh: bool) -> bool {
        let tx = self.tx_of(k);
        let t = tx as usize;
        let plan = self.plan(tx).clone();
        let n = plan.entries.len() as u8;
        if let (Some(stamp), false) = (s.batch_tokens[t], fresh) {
            // The SDK's retry of a request that landed, with the same token: DynamoDB answers
            // success and writes nothing (the locks may have been released since: every later
            // step is conditional on them).
            if lost {
                return false;
            }
            self.batch_succeeded(s, k, stamp);
            return true;
        }
        let stamp = (k, s.coordinators[k as usize].locks_written);
        let absent = s.coordinators[k as usize]
            .batch_absent
            .clone()
            .unwrap_or_else(|| vec![false; plan.entries.len()]);
        let record_free = s.records[t].is_none() && !s.tombstones[t];
        let unlocked = plan.entries.iter().all(|e| s.items[e.item].owner.is_none());
        let broken = self.cfg.bug == Some(Bug::PlaceholderWithoutAbsentCheck);
        let free = record_free
            && unlocked
            && plan
                .entries
                .iter()
                .zip(&absent)
                .all(|(e, &a)| s.items[e.item].present != a || (a && broken));
        if !free {
            if lost {
                return false; // a cancellation nobody heard of changed nothing
            }
            if record_free && unlocked && s.coordinators[k as usize].batch_absent.is_none() {
                // Cancelled only by the items' existence: once more, as the reasons showed them.
                s.coordinators[k as usize].batch_absent = Some(
                    plan.entries
                        .iter()
                        .map(|e| !s.items[e.item].present)
                        .collect(),
                );
                return true;
            }
            // Cancelled: nothing was written, not even the record. ALL_OLD of each item whose
            // condition failed says why; the record's failed condition means an earlier attempt
            // landed (or another handle wrote it): read and merge it, as a failed create does.
            s.batch_fell_back = true;
            s.coordinators[k as usize].batch_done = true;
            for (e, entry) in plan.entries.iter().enumerate() {
                let it = s.items[entry.item];
                s.coordinators[k as usize].items[e] = if it.owner == Some(tx) {
                    Self::knows_from(&it)
                } else if !it.present {
                    Knows::Absent
                } else {
                    Knows::Nothing // unlocked (its condition held) or another's: per item
                };
            }
            if s.records[t].is_some() {
                self.absorb(s, k);
            }
            return true;
        }
        s.records[t] = Some(Record {
            state: TxState::Pending,
            version: 1,
            requests: n,
            finalized: false,
        });
        for (entry, &a) in plan.entries.iter().zip(&absent) {
            let it = &mut s.items[entry.item];
            if a {
                it.present = true;
                it.transient = true;
                s.batch_placeholder = true;
            }
            it.owner = Some(tx);
            it.stamp = Some(stamp);
            it.late = false;
            // `_TxU`, in the request conditional on the record's creation.
            it.roll = plan.roll_forward && entry.op.is_write();
        }
        s.batch_tokens[t] = Some(stamp);
        if !self.cfg.second_handles.is_empty() {
            s.coordinators[k as usize].locks_written += 1;
        }
        if !lost {
            self.batch_succeeded(s, k, stamp);
        }
        true
    }

    fn batch_succeeded(&self, s: &mut State, k: Slot, stamp: (Slot, u8)) {
        let tx = self.tx_of(k);
        let n = self.plan(tx).entries.len();
        let pre_read = s.coordinators[k as usize].pre_read.clone();
        let plan = self.plan(tx).clone();
        let c = &mut s.coordinators[k as usize];
        let absent = c.batch_absent.clone().unwrap_or_else(|| vec![false; n]);
        c.batch_done = true;
        c.version = 1;
        c.recorded = n as u8;
        for e in 0..n {
            let roll = plan.roll_forward && plan.entries[e].op.is_write();
            c.items[e] = match &pre_read {
                // A placeholder's lock is known whole: the item did not exist.
                _ if absent[e] => Knows::Locked {
                    applied: false,
                    transient: true,
                    before: None,
                    image_ref: false,
                    stamp,
                    roll,
                },
                // The naive variant takes the image it read before locking.
                Some(data) => Knows::Locked {
                    applied: false,
                    transient: false,
                    before: data[e],
                    image_ref: false,
                    stamp,
                    roll,
                },
                None => Knows::Batched { stamp, roll },
            };
        }
    }

    /// `Bug::BatchImagesReadBeforeLock`: BatchGetItem of every item before the batch.
    pub(crate) fn pre_read(&self, s: &mut State, k: Slot) -> bool {
        let tx = self.tx_of(k);
        let data = self
            .plan(tx)
            .entries
            .iter()
            .map(|e| s.items[e.item].data)
            .collect();
        s.coordinators[k as usize].pre_read = Some(data);
        true
    }

    /// A consistent read of an item locked by the batch, before its phased apply: the item as it
    /// is now is its before-image if it still carries our lock (`_TxId = me`, our stamp); the
    /// apply is conditional on that stamp, so the lock stood from the batch to the apply and
    /// nobody changed the item in between. Otherwise the lock is gone: learn why from the record.
    pub(crate) fn read_image(&self, s: &mut State, k: Slot, e: u8) -> bool {
        let tx = self.tx_of(k);
        let i = self.entry(tx, e).item;
        let Knows::Batched { stamp, .. } = s.coordinators[k as usize].items[e as usize] else {
            return false;
        };
        let it = s.items[i];
        if it.owner == Some(tx) && it.stamp == Some(stamp) {
            s.coordinators[k as usize].items[e as usize] = Self::knows_from(&it);
        } else {
            self.absorb(s, k);
            if s.coordinators[k as usize].phase == Phase::Running {
                s.coordinators[k as usize].items[e as usize] = Knows::Nothing;
            }
        }
        true
    }
}
