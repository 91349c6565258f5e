//! The coordinator's steps, one DynamoDB request each: fast commit, record, lock, save image,
//! apply, commit in one request, decide, resume.

use super::*;

impl ProtocolModel {
    pub(crate) fn fast_commit(&self, s: &mut State, k: Slot, lost: bool) -> bool {
        let tx = self.tx_of(k);
        let t = tx as usize;
        if s.tokens[t] {
            // A repeat with the same ClientRequestToken: DynamoDB answers success, applies nothing.
            if lost {
                return false;
            }
            Self::done(s, k);
            return true;
        }
        let plan = self.plan(tx).clone();
        let free = s.records[t].is_none()
            && !s.tombstones[t]
            && plan.entries.iter().all(|e| s.items[e.item].owner.is_none());
        if !free {
            if lost {
                return false;
            }
            s.coordinators[k as usize].fast_failed = true;
            return true;
        }
        for e in &plan.entries {
            let it = &mut s.items[e.item];
            if e.op.is_write() {
                *it = Item::unlocked(e.op.apply(it.data));
            }
        }
        s.records[t] = Some(Record {
            state: TxState::Committed,
            version: 1,
            requests: plan.entries.len() as u8,
            finalized: true,
        });
        s.tokens[t] = true;
        self.commit_ghost(s, tx, plan.entries.len() as u8);
        if !lost {
            Self::done(s, k);
        }
        true
    }

    pub(crate) fn record(&self, s: &mut State, k: Slot, lost: bool) -> bool {
        let tx = self.tx_of(k);
        let t = tx as usize;
        let c = s.coordinators[k as usize].clone();
        let target = self.record_target(&c, tx);
        match (c.version, s.records[t]) {
            // An earlier creation may have landed (its answer was lost), and the record is absent:
            // never created, or finished by another handle and deleted. Not created again: a
            // tombstone ends the transaction (`UnknownOutcome`).
            (0, None) if c.in_doubt => {
                if lost {
                    return false;
                }
                s.tombstones[t] = true;
                Self::done(s, k);
            }
            // The creation fails on a tombstone: `RolledBack` (or `UnknownOutcome` after an
            // earlier creation in doubt). Its locks are released by whoever put the tombstone.
            (0, None) if s.tombstones[t] => {
                if lost {
                    return false;
                }
                s.creation_refused = true;
                Self::done(s, k);
            }
            // Create, conditional on attribute_not_exists(_TxId).
            (0, None) => {
                s.records[t] = Some(Record {
                    state: TxState::Pending,
                    version: 1,
                    requests: target,
                    finalized: false,
                });
                let c = &mut s.coordinators[k as usize];
                if !lost {
                    c.version = 1;
                    c.recorded = target;
                    // A lock taken without a record is trusted (the creation did not fail on a
                    // tombstone, and time is not modelled: see `check_unrecorded_lock`).
                    c.unrecorded_lock = None;
                } else {
                    c.in_doubt = true;
                }
                if lost && self.cfg.reads != ReadShape::RecordThenLock {
                    // The read whose lock went with this creation fails (the creation's answer
                    // is lost): its lock, landed or not, is not trusted; the read, repeated,
                    // records then locks. A read that took its lock without a record returned
                    // already: its lock stays, named by the record if the creation landed.
                    for e in 0..c.items.len() {
                        if c.reads[e].is_some() && c.unrecorded_lock != Some(e as u8) {
                            c.items[e] = Knows::Nothing;
                            c.reads[e] = None;
                        }
                    }
                }
            }
            // Append, conditional on `_TxS = P AND _TxV = v`.
            (v, Some(r)) if v > 0 && r.state == TxState::Pending && r.version == v => {
                s.records[t] = Some(Record {
                    version: v + 1,
                    requests: target,
                    ..r
                });
                let appending = self.appending_read(&c, tx);
                let c = &mut s.coordinators[k as usize];
                if !lost {
                    c.version = v + 1;
                    c.recorded = target;
                } else if appending.is_some() {
                    // `RecordWithLock`: the read does not repeat its append; the next record
                    // write meets the version this one set and learns it (`merge_record`).
                    c.append_failed = appending;
                }
            }
            // The condition failed: ALL_OLD shows our own earlier write (same nonce), another
            // handle's append, or a decision.
            //
            // With `RecordWithLock`, a read's append that finds the transaction decided (or its
            // record gone) ends the handle here, its lock maybe still in flight. The model does
            // not let that lock land afterwards, but every such run is matched by one where the
            // failed append comes after the lock landed: it changes nothing but this handle's
            // phase, and fails as surely later (a decision, or an absence, is final). A landed
            // lock is released by the world like a late one, as `finish_decided` releases it.
            (_, Some(_)) if !lost => self.absorb(s, k),
            // An append to a vanished record: `UnknownOutcome` (late locks released by the world).
            (v, None) if v > 0 && !lost => Self::done(s, k),
            _ => return false,
        }
        true
    }

    /// `RecordWithLock`: the append sent with a read's lock fails transiently without landing
    /// (throttled, or its timeout before it reached the table): the read returns once its lock
    /// answered, unrecorded; the next record write records it. Counted as a lost response.
    pub(crate) fn append_fails(&self, s: &mut State, k: Slot) -> bool {
        let tx = self.tx_of(k);
        let c = &s.coordinators[k as usize];
        let Some(e) = self.appending_read(c, tx) else {
            return false;
        };
        s.coordinators[k as usize].append_failed = Some(e);
        true
    }

    pub(crate) fn lock(&self, s: &mut State, k: Slot, e: u8, lost: bool) -> bool {
        let tx = self.tx_of(k);
        let t = tx as usize;
        let i = self.entry(tx, e).item;
        let it = s.items[i];
        let knows = s.coordinators[k as usize].items[e as usize];
        let without_record = self.locks_without_record(&s.coordinators[k as usize], tx, e);
        let mine = it.owner == Some(tx);
        // Without second handles a slot's earlier locks can no longer be applied to when it locks
        // again (a crashed handle never acts again; a live one relocks only after learning its lock
        // was lost), so one stamp per slot suffices and keeps the state space small.
        let counted = !self.cfg.second_handles.is_empty();
        let stamp = (k, s.coordinators[k as usize].locks_written);
        let new_knows = match knows {
            Knows::Nothing => {
                if it.present && it.owner.is_none() {
                    // SET _TxId, _TxD IF attribute_exists(hk) AND attribute_not_exists(_TxId).
                    s.items[i].owner = Some(tx);
                    s.items[i].stamp = Some(stamp);
                    Knows::Locked {
                        applied: false,
                        transient: false,
                        before: it.data,
                        image_ref: false,
                        stamp,
                        roll: false,
                    }
                } else if mine {
                    if lost {
                        return false;
                    }
                    Self::knows_from(&it)
                } else if !it.present {
                    if lost {
                        return false;
                    }
                    Knows::Absent
                } else {
                    return false; // held by another transaction: contention (the world resolves it)
                }
            }
            Knows::Absent => {
                let broken = self.cfg.bug == Some(Bug::PlaceholderWithoutAbsentCheck);
                if !it.present || (broken && it.owner.is_none()) {
                    // SET _TxId, _TxD, _TxT IF attribute_not_exists(hk).
                    let it = &mut s.items[i];
                    it.present = true;
                    it.owner = Some(tx);
                    it.transient = true;
                    it.stamp = Some(stamp);
                    Knows::Locked {
                        applied: false,
                        transient: true,
                        before: None,
                        image_ref: false,
                        stamp,
                        roll: false,
                    }
                } else if mine {
                    if lost {
                        return false;
                    }
                    Self::knows_from(&it)
                } else if it.owner.is_none() {
                    if lost {
                        return false;
                    }
                    Knows::Nothing // created meanwhile: lock it as existing
                } else {
                    return false;
                }
            }
            Knows::Locked { .. } | Knows::Batched { .. } => return false,
        };
        let new_knows = match new_knows {
            Knows::Locked {
                roll: false,
                applied: false,
                transient,
                before,
                image_ref,
                stamp,
            } if !mine
                && s.items[i].owner == Some(tx)
                && self.cfg.bug == Some(Bug::RollMarkOnPerItemLock)
                && self.plan(tx).roll_forward
                && self.entry(tx, e).op.is_write() =>
            {
                s.items[i].roll = true;
                Knows::Locked {
                    roll: true,
                    applied: false,
                    transient,
                    before,
                    image_ref,
                    stamp,
                }
            }
            k => k,
        };
        if s.items[i].owner == Some(tx) && !mine {
            if counted {
                s.coordinators[k as usize].locks_written += 1;
            }
            s.items[i].late = s.records[t].is_none_or(|r| r.state != TxState::Pending);
        }
        if !lost {
            let c = &mut s.coordinators[k as usize];
            c.items[e as usize] = new_knows;
            if without_record && matches!(new_knows, Knows::Locked { .. }) {
                c.unrecorded_lock = Some(e);
            }
            // An interactive read returns the item as its lock found it.
            let entry = self.entry(tx, e);
            if let (Op::Get, true, None, Knows::Locked { before, .. }) =
                (entry.op, entry.now, c.resumed, new_knows)
            {
                c.reads[e as usize].get_or_insert(before);
            }
        }
        true
    }

    pub(crate) fn read_header(&self, s: &mut State, k: Slot) -> bool {
        let tx = self.tx_of(k);
        match s.records[tx as usize] {
            Some(r) if r.state == TxState::Pending => s.coordinators[k as usize].header_ok = true,
            _ => Self::done(s, k),
        }
        true
    }

    pub(crate) fn save_image(&self, s: &mut State, k: Slot, e: u8) -> bool {
        let tx = self.tx_of(k);
        let t = tx as usize;
        let i = self.entry(tx, e).item;
        let Knows::Locked { before, .. } = s.coordinators[k as usize].items[e as usize] else {
            return false;
        };
        s.images[t][i] = before;
        s.coordinators[k as usize].image_saved[e as usize] = true;
        true
    }

    pub(crate) fn apply(&self, s: &mut State, k: Slot, e: u8, lost: bool) -> bool {
        let tx = self.tx_of(k);
        let t = tx as usize;
        let entry = self.entry(tx, e).clone();
        let i = entry.item;
        let Knows::Locked {
            transient,
            before,
            stamp,
            roll,
            ..
        } = s.coordinators[k as usize].items[e as usize]
        else {
            return false;
        };
        let phased = !(entry.now && s.coordinators[k as usize].resumed.is_none());
        let pending = s.records[t].is_some_and(|r| r.state == TxState::Pending);
        let it = s.items[i];
        // Conditional on `_TxId = me AND _TxD = <our stamp> AND attribute_not_exists(_TxA)`:
        // another lock of the same transaction (a second handle's late lock) is not ours.
        let ours = it.owner == Some(tx)
            && (it.stamp == Some(stamp)
                || it.applied != Applied::No
                || self.cfg.bug == Some(Bug::ApplyIgnoresLockStamp));
        if (phased && !pending) || !ours || it.applied != Applied::No {
            if lost {
                return false;
            }
            if phased && !pending {
                // The ConditionCheck on the record failed: `header_failed`.
                self.absorb(s, k);
            } else if !ours {
                // Our lock is gone: somebody decided the transaction (`absorb_conflict`).
                self.absorb(s, k);
                if s.coordinators[k as usize].phase == Phase::Running {
                    s.coordinators[k as usize].items[e as usize] = Knows::Nothing;
                }
            } else {
                // Applied already (a lost response, or another handle): adopt it.
                s.coordinators[k as usize].items[e as usize] = Self::knows_from(&it);
            }
            return true;
        }
        let saved = s.coordinators[k as usize].image_saved[e as usize];
        let it = &mut s.items[i];
        if entry.op == Op::Delete {
            it.applied = Applied::DeleteMark;
        } else {
            it.data = entry.op.apply(it.data);
            it.applied = Applied::Yes;
            if !transient {
                if saved {
                    it.image_ref = true;
                } else {
                    it.image = before;
                }
            }
        }
        if !lost {
            s.coordinators[k as usize].items[e as usize] = Knows::Locked {
                applied: true,
                transient,
                before,
                image_ref: saved && !transient && entry.op != Op::Delete,
                stamp,
                roll,
            };
            s.coordinators[k as usize].header_ok = false;
        }
        true
    }

    pub(crate) fn commit_one_request(&self, s: &mut State, k: Slot, lost: bool) -> bool {
        let tx = self.tx_of(k);
        let t = tx as usize;
        let c = s.coordinators[k as usize].clone();
        let Some(r) = s.records[t] else {
            if lost {
                return false;
            }
            Self::done(s, k);
            return true;
        };
        if !self.decide_allowed(&r, c.version) {
            if lost {
                return false;
            }
            self.absorb(s, k);
            return true;
        }
        // The requests not yet recorded go into the decisive write (`fold_into_decision`).
        let folded = self.folds(&c, tx);
        // Every item's final write is conditional on our lock and the applied flag we know.
        for e in 0..c.known {
            let i = self.entry(tx, e).item;
            let applied = match self.lock_of(&c, tx, e) {
                Knows::Locked { applied, .. } => applied,
                Knows::Batched { .. } => false,
                _ => return false,
            };
            let it = s.items[i];
            if it.owner != Some(tx) || (it.applied != Applied::No) != applied {
                if lost {
                    return false;
                }
                if it.owner != Some(tx) {
                    self.absorb(s, k);
                    if s.coordinators[k as usize].phase == Phase::Running {
                        s.coordinators[k as usize].items[e as usize] = Knows::Nothing;
                    }
                } else {
                    s.coordinators[k as usize].items[e as usize] = Self::knows_from(&it);
                }
                return true;
            }
        }
        for e in 0..c.known {
            let entry = self.entry(tx, e).clone();
            let applied = matches!(self.lock_of(&c, tx, e), Knows::Locked { applied: true, .. });
            let it = &mut s.items[entry.item];
            if applied {
                // `settle_write(committed)` of an item applied early: remove the lock attributes.
                Self::clear_lock(it);
            } else {
                match entry.op {
                    Op::Get => Self::release(it),
                    Op::Delete => *it = Item::unlocked(None),
                    op => *it = Item::unlocked(op.apply(it.data)),
                }
            }
        }
        let requests = if folded { c.known } else { r.requests };
        s.records[t] = Some(Record {
            state: TxState::Committed,
            finalized: true,
            requests,
            version: r.version + u8::from(folded),
        });
        if folded {
            s.folded_commit = true;
        }
        self.commit_ghost(s, tx, requests);
        if !lost {
            Self::done(s, k);
        }
        true
    }

    /// `commit_without_record`: the one item's final write, conditional on our lock (owner and
    /// stamp) and on its not being applied. A failed condition ends the handle: our lock was
    /// released under a tombstone (`RolledBack`), or, after an earlier send whose answer was
    /// lost, by that send (`Committed`, no tombstone) or either (`UnknownOutcome`).
    pub(crate) fn commit_without_record(&self, s: &mut State, k: Slot, lost: bool) -> bool {
        let tx = self.tx_of(k);
        let c = s.coordinators[k as usize].clone();
        let Some(e) = c.unrecorded_lock else {
            return false;
        };
        let Knows::Locked { stamp, .. } = self.lock_of(&c, tx, e) else {
            return false;
        };
        let i = self.entry(tx, e).item;
        let it = s.items[i];
        let ours = it.owner == Some(tx) && it.stamp == Some(stamp) && it.applied == Applied::No;
        let lands = if self.cfg.bug == Some(Bug::CommitWithoutRecordIgnoresLock) {
            it.owner.is_none() || it.owner == Some(tx)
        } else {
            ours
        };
        if !lands {
            if lost {
                return false;
            }
            if !ours && s.commits[tx as usize] == 0 {
                s.commit_without_record_refused = true;
            }
            Self::done(s, k);
            return true;
        }
        let write = self.plan(tx).entries.iter().find(|x| x.op.is_write());
        let item = &mut s.items[i];
        match write.map(|x| x.op) {
            None => Self::release(item),
            Some(Op::Delete) => *item = Item::unlocked(None),
            Some(op) => *item = Item::unlocked(op.apply(item.data)),
        }
        s.committed_without_record = true;
        self.commit_ghost(s, k, c.known);
        if !lost {
            Self::done(s, k);
        }
        true
    }

    pub(crate) fn decide(&self, s: &mut State, k: Slot, to: TxState, lost: bool) -> bool {
        let tx = self.tx_of(k);
        let t = tx as usize;
        let version = s.coordinators[k as usize].version;
        match s.records[t] {
            Some(r) if self.decide_allowed(&r, version) => {
                s.records[t] = Some(Record { state: to, ..r });
                self.mark_decided(s, tx);
                if to == TxState::Committed {
                    self.commit_ghost(s, tx, r.requests);
                }
                if !lost {
                    Self::done(s, k);
                }
                true
            }
            _ if lost => false,
            _ => {
                self.absorb(s, k);
                true
            }
        }
    }

    pub(crate) fn resume(&self, s: &mut State, k: Slot, intent: Intent) -> bool {
        let tx = self.tx_of(k);
        let t = tx as usize;
        match s.records[t] {
            Some(r) if r.state == TxState::Pending => {
                let n = self.plan(tx).entries.len();
                s.coordinators[k as usize] = Coordinator {
                    phase: Phase::Running,
                    resumed: Some(intent),
                    version: r.version,
                    recorded: r.requests,
                    known: r.requests,
                    items: vec![Knows::Nothing; n],
                    header_ok: false,
                    image_saved: vec![false; n],
                    fast_failed: true,
                    locks_written: s.coordinators[k as usize].locks_written,
                    batch_done: true,
                    batch_absent: None,
                    pre_read: None,
                    in_doubt: false,
                    append_failed: None,
                    reads: vec![None; n],
                    unrecorded_lock: None,
                };
            }
            // Decided: `resume` + `commit`/`rollback` complete it (the world's settle actions);
            // gone: `TransactionNotFound`.
            _ => Self::done(s, k),
        }
        true
    }
}
