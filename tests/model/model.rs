//! The actions, the model itself and the helpers its steps share (what a coordinator does next,
//! what a reader at `Committed` sees, when a state is quiescent and clean).

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Action {
    /// `commit_write_only`: one TransactWriteItems creating the record committed and applying every
    /// write, each conditional on its item not being locked (idempotent by its request token).
    FastCommit { c: Slot, lost: bool },
    /// The batched locking commit's first request: one TransactWriteItems creating the record and
    /// locking every item (`fresh`: a retry DynamoDB does not match to the landed request's token).
    BatchLock { c: Slot, lost: bool, fresh: bool },
    /// After an ambiguous failure of the batch, the per-item path (which recognises its own
    /// record and locks by their contents).
    BatchFallBack { c: Slot },
    /// The naive batched lock's BatchGetItem of the before-images before the batch.
    PreRead { c: Slot },
    /// The consistent read (BatchGetItem) of an item the batch locked, for its before-image, before
    /// a phased apply.
    ReadImage { c: Slot, entry: u8 },
    /// `record::create` / `record::append` (from `Transaction::flush`): PutItem / UpdateItem of the
    /// header conditional on absence / `_TxS = P AND _TxV = v`.
    Record { c: Slot, lost: bool },
    /// `RecordWithLock`: the append sent with a read's lock fails without landing; the read goes
    /// on unrecorded.
    AppendFails { c: Slot },
    /// `ReleaseUnrecordedLock` only: a contender releases a lock its pending record does not name.
    ReleaseStray { tx: Tx, item: u8 },
    /// `item_lock::lock_write`: lock an existing item (ALL_OLD), or insert the placeholder of an
    /// absent one, conditional on it still being absent.
    Lock { c: Slot, entry: u8, lost: bool },
    /// `apply_now`: `record::load_header` must say pending before an immediate apply.
    ReadHeader { c: Slot },
    /// `item_lock::save_table_image` (from `image_place`): a large before-image goes to the images
    /// table before the apply.
    SaveImage { c: Slot, entry: u8 },
    /// `apply_now` (no record check in the write) or a `commit_phased` apply batch (with a
    /// ConditionCheck that the record is pending): conditional on `_TxId = me AND
    /// attribute_not_exists(_TxA)`, sets `_TxA` and embeds the before-image.
    Apply { c: Slot, entry: u8, lost: bool },
    /// `commit_one_shot`: TransactWriteItems of the decision `P -> C` + `_TxF` on the version and
    /// every item's final write, conditional on our lock and the applied flag we know.
    CommitOneRequest { c: Slot, lost: bool },
    /// `commit_phased` step 2: `record::decide` `P -> C`, conditional on the version.
    Flip { c: Slot, lost: bool },
    /// `commit_without_record` (`record_on_demand`): the item's final write on its own,
    /// conditional on our lock (owner and stamp) and on its not being applied.
    CommitWithoutRecord { c: Slot, lost: bool },
    /// `rollback_locked` of a resumed handle: `record::decide` `P -> R` on the version it read.
    RollBack { c: Slot, lost: bool },
    /// The coordinator's process dies.
    Crash { c: Slot },
    /// `TransactionManager::resume` after a crash: read the record, then commit or roll back.
    Resume { c: Slot, intent: Intent },
    /// `contention::resolve` / `rollback_transaction` / the sweeper / `dead_after`: `P -> R` on the
    /// version just read.
    WorldRollBack { tx: Tx },
    /// One item of `Transaction::complete` (by anybody): `settle_write` for what the item shows.
    Settle { tx: Tx, item: u8 },
    /// `complete` after settling (or `after_finalize`, or the sweeper): delete an images-table image.
    DeleteImage { tx: Tx, item: u8 },
    /// `record::finalize`, after `complete` settled every item.
    Finalize { tx: Tx },
    /// `record::delete` / the sweeper's `delete_after` / TTL, on a finalized record.
    DeleteRecord { tx: Tx },
    /// `contention::decide_absent` (from `steal_orphan` or the sweeper): a lock's record is absent;
    /// put a tombstone under its id, conditional on the record's absence.
    Tombstone { tx: Tx },
    /// `contention::steal_orphan` / the sweeper: the record is absent and a tombstone stands in
    /// its place (with `OrphanReleaseWithoutTombstone`, without one): release an unapplied lock.
    ReleaseOrphan { tx: Tx, item: u8 },
}

/// What the next step of a running coordinator is.
pub(crate) enum Next {
    Fast,
    BatchLock,
    PreRead,
    ReadImage(Vec<u8>),
    Record,
    /// `LockThenRecord`: the record's creation and the first read's lock in flight together
    /// (`Transaction::lock_with_creation`).
    RecordAndLock(u8),
    /// `RecordWithLock`, a read once the record exists: the record's append and the read's lock in
    /// flight together (the lock only while it has not answered).
    AppendWithLock(u8),
    Lock(Vec<u8>),
    SaveImage(Vec<u8>),
    ReadHeader,
    Apply(Vec<u8>),
    CommitOneRequest,
    CommitWithoutRecord,
    Flip,
    RollBack,
}

pub(crate) struct ProtocolModel {
    pub(crate) cfg: Config,
}

impl ProtocolModel {
    pub(crate) fn tx_of(&self, k: Slot) -> Tx {
        let n = self.cfg.txs.len() as Slot;
        if k < n {
            k
        } else {
            self.cfg.second_handles[(k - n) as usize]
        }
    }

    pub(crate) fn plan(&self, tx: Tx) -> &Plan {
        &self.cfg.txs[tx as usize]
    }

    pub(crate) fn entry(&self, tx: Tx, e: u8) -> &Entry {
        &self.plan(tx).entries[e as usize]
    }

    /// The entry of `tx`'s plan that concerns `item` among the first `n` (what a completer learns
    /// from the record's requests).
    pub(crate) fn recorded_op(&self, tx: Tx, item: usize, n: u8) -> Option<Op> {
        // A read and a later write of one item: the write is what the item is settled for.
        self.plan(tx).entries[..n as usize]
            .iter()
            .filter(|e| e.item == item)
            .map(|e| e.op)
            .fold(None, |found, op| match found {
                Some(w) if w != Op::Get && op == Op::Get => Some(w),
                _ => Some(op),
            })
    }

    /// What the handle knows of the lock on entry `e`'s item: the entry's own lock, or the lock
    /// another entry of the same item took (a write on an item read earlier).
    pub(crate) fn lock_of(&self, c: &Coordinator, tx: Tx, e: u8) -> Knows {
        let own = c.items[e as usize];
        if matches!(own, Knows::Locked { .. } | Knows::Batched { .. }) {
            return own;
        }
        let item = self.entry(tx, e).item;
        (0..c.known)
            .filter(|&x| self.entry(tx, x).item == item)
            .map(|x| c.items[x as usize])
            .find(|k| matches!(k, Knows::Locked { .. } | Knows::Batched { .. }))
            .unwrap_or(own)
    }

    /// `append_folds_into_commit`: the one-request commit records the requests not yet in the
    /// record itself (in its decisive write) when the record exists, is not in doubt, and every
    /// item is already held, and what is unrecorded is not only held reads.
    pub(crate) fn folds(&self, c: &Coordinator, tx: Tx) -> bool {
        let held = |e: u8| {
            matches!(
                self.lock_of(c, tx, e),
                Knows::Locked { .. } | Knows::Batched { .. }
            )
        };
        self.plan(tx).commit == CommitPath::OneRequest
            && c.version > 0
            && !c.in_doubt
            && c.recorded < c.known
            && self.interactive(c, tx).is_none()
            && (c.recorded..c.known).any(|e| self.entry(tx, e).op.is_write())
            && (0..c.known).all(held)
    }

    pub(crate) fn needs_table_image(&self, tx: Tx, e: u8, k: &Knows) -> bool {
        let entry = self.entry(tx, e);
        matches!(entry.op, Op::Put(_) | Op::Update)
            && self.cfg.big[entry.item]
            && matches!(
                k,
                Knows::Locked {
                    transient: false,
                    image_ref: false,
                    ..
                }
            )
    }

    pub(crate) fn next_step(&self, s: &State, k: Slot) -> Next {
        let tx = self.tx_of(k);
        let c = &s.coordinators[k as usize];
        let plan = self.plan(tx);
        if c.resumed == Some(Intent::Rollback) {
            return Next::RollBack;
        }
        if plan.fast && c.resumed.is_none() && c.version == 0 && !c.fast_failed {
            return Next::Fast;
        }
        if plan.batch_lock && c.resumed.is_none() && c.version == 0 && !c.batch_done {
            return match (self.cfg.bug, &c.pre_read) {
                (Some(Bug::BatchImagesReadBeforeLock), None) => Next::PreRead,
                _ => Next::BatchLock,
            };
        }
        let n = c.known;
        let held = |e: u8| {
            matches!(
                c.items[e as usize],
                Knows::Locked { .. } | Knows::Batched { .. }
            )
        };
        let applied = |e: u8| matches!(c.items[e as usize], Knows::Locked { applied: true, .. });
        // Interactive requests are driven one by one, in order: reads locked, writes applied.
        if let Some(e) = self.interactive(c, tx) {
            let read = self.entry(tx, e).op == Op::Get;
            if self.locks_without_record(c, tx, e) {
                return Next::Lock(vec![e]);
            }
            // The first read of a handle that never wrote its record (a read returns once both
            // answered: a later read finds the record known, or in doubt). A lock taken without
            // a record does not count: its request goes with this creation.
            if read
                && c.version == 0
                && !c.in_doubt
                && (0..c.known).all(|x| !held(x) || c.unrecorded_lock == Some(x))
                && self.cfg.reads != ReadShape::RecordThenLock
            {
                return Next::RecordAndLock(e);
            }
            // A later read's append, with its lock while that has not answered.
            if read
                && c.version > 0
                && self.cfg.reads == ReadShape::RecordWithLock
                && c.recorded < self.record_target(c, tx)
            {
                return Next::AppendWithLock(e);
            }
            if c.recorded < self.record_target(c, tx) {
                return Next::Record;
            }
            return if !held(e) {
                Next::Lock(vec![e])
            } else if self.needs_table_image(tx, e, &c.items[e as usize])
                && !c.image_saved[e as usize]
            {
                Next::SaveImage(vec![e])
            } else if !c.header_ok {
                Next::ReadHeader
            } else {
                Next::Apply(vec![e])
            };
        }
        if self.commits_without_record(c, tx) {
            return Next::CommitWithoutRecord;
        }
        if self.folds(c, tx) {
            return Next::CommitOneRequest;
        }
        if c.recorded < self.record_target(c, tx) {
            return Next::Record;
        }
        let unlocked: Vec<u8> = (0..n).filter(|&e| !held(e)).collect();
        if !unlocked.is_empty() {
            return Next::Lock(unlocked);
        }
        // The batch returned no before-images: a phased apply needs the item as locked, read
        // after the lock. The one-request commit needs none (the lock's padding made DynamoDB
        // judge each update's room; sizes are not modelled, and an update that copies an
        // attribute, whose item the code reads, is an update like any other here).
        // A put or delete rolled forward needs nothing of its item; an update rolled forward is
        // read for its result (known here: the model's writes all succeed).
        let unread: Vec<u8> = (0..n)
            .filter(|&e| match c.items[e as usize] {
                Knows::Batched { roll, .. } => !roll || !self.rolls_without_image(tx, e),
                _ => false,
            })
            .filter(|&e| plan.commit == CommitPath::Phased && self.entry(tx, e).op.is_write())
            .collect();
        if !unread.is_empty() {
            return Next::ReadImage(unread);
        }
        match plan.commit {
            CommitPath::OneRequest => Next::CommitOneRequest,
            CommitPath::Phased => {
                // `rolls_forward`: a marked, unapplied write waits for the settle after the flip.
                let rolls = |e: u8| {
                    self.rolled(tx, e)
                        && matches!(
                            c.items[e as usize],
                            Knows::Locked {
                                roll: true,
                                applied: false,
                                ..
                            } | Knows::Batched { roll: true, .. }
                        )
                };
                let todo: Vec<u8> = (0..n)
                    .filter(|&e| self.entry(tx, e).op.is_write() && !applied(e) && !rolls(e))
                    .collect();
                if todo.is_empty() {
                    return Next::Flip;
                }
                let (save, apply): (Vec<u8>, Vec<u8>) = todo.into_iter().partition(|&e| {
                    self.needs_table_image(tx, e, &c.items[e as usize])
                        && !c.image_saved[e as usize]
                });
                // Independent items are applied concurrently: any of them may go first.
                if !save.is_empty() && !apply.is_empty() {
                    let mut all = save;
                    all.extend(apply);
                    Next::Apply(all)
                } else if !save.is_empty() {
                    Next::SaveImage(save)
                } else {
                    Next::Apply(apply)
                }
            }
        }
    }

    /// `rolls_forward`: whether the commit rolls entry `e`'s marked write forward (every write of
    /// the model is known to succeed, but a put of a plan with `roll_applies_puts`, whose condition
    /// only DynamoDB judges).
    pub(crate) fn rolled(&self, tx: Tx, e: u8) -> bool {
        let plan = self.plan(tx);
        !(plan.roll_applies_puts && matches!(self.entry(tx, e).op, Op::Put(_)))
    }

    /// A marked write the commit rolls forward without reading its item: a put or a delete.
    pub(crate) fn rolls_without_image(&self, tx: Tx, e: u8) -> bool {
        self.rolled(tx, e) && matches!(self.entry(tx, e).op, Op::Put(_) | Op::Delete)
    }

    /// The first interactive request of the plan this (original) handle has not finished: a read
    /// not locked yet (with `RecordWithLock`, or whose record write, sent with its lock, has not
    /// answered yet), a write not applied yet.
    pub(crate) fn interactive(&self, c: &Coordinator, tx: Tx) -> Option<u8> {
        if c.resumed.is_some() {
            return None;
        }
        (0..c.known).find(|&e| {
            let entry = self.entry(tx, e);
            entry.now
                && match c.items[e as usize] {
                    Knows::Locked { applied, .. } if entry.op.is_write() => !applied,
                    Knows::Locked { .. } => {
                        self.cfg.reads == ReadShape::RecordWithLock
                            && c.recorded <= e
                            && c.append_failed != Some(e)
                            && c.unrecorded_lock != Some(e)
                    }
                    _ => true,
                }
        })
    }

    /// A plan of the run takes locks without a record (`record_on_demand`): the scenarios built
    /// for it check the states it reaches, not every state the others reach.
    pub(crate) fn on_demand(&self) -> bool {
        self.cfg.txs.iter().any(|p| p.on_demand)
    }

    /// Some plan commits without a record: it takes its locks without one and stays on one item.
    pub(crate) fn commits_without_records(&self) -> bool {
        self.cfg.txs.iter().any(single_item_on_demand)
    }

    /// No plan's interactive read goes with a record's creation: every plan that reads
    /// interactively commits without a record.
    pub(crate) fn no_read_creates(&self) -> bool {
        self.cfg
            .txs
            .iter()
            .all(|p| single_item_on_demand(p) || !p.entries.iter().any(|e| e.now))
    }

    /// `record_on_demand` (`may_lock_without_record`): entry `e` is an interactive read of a
    /// handle that never wrote its record nor holds a lock, and every entry before it is on its
    /// item: it takes its lock alone.
    pub(crate) fn locks_without_record(&self, c: &Coordinator, tx: Tx, e: u8) -> bool {
        let entry = self.entry(tx, e);
        self.plan(tx).on_demand
            && c.resumed.is_none()
            && c.version == 0
            && !c.in_doubt
            && c.unrecorded_lock.is_none()
            && entry.op == Op::Get
            && entry.now
            && (0..e).all(|x| self.entry(tx, x).item == entry.item)
            && c.items.iter().all(|k| matches!(k, Knows::Nothing))
    }

    /// `write_without_record` (the commit fits): the handle holds its one item by a lock taken
    /// without a record, never wrote a record nor may have, and every entry of the plan is on
    /// that item.
    pub(crate) fn commits_without_record(&self, c: &Coordinator, tx: Tx) -> bool {
        let Some(e) = c.unrecorded_lock else {
            return false;
        };
        let item = self.entry(tx, e).item;
        c.version == 0
            && !c.in_doubt
            && self.interactive(c, tx).is_none()
            && (0..c.known).all(|x| self.entry(tx, x).item == item)
            && matches!(self.lock_of(c, tx, e), Knows::Locked { applied: false, .. })
    }

    /// `RecordWithLock`: the read whose record write (an append, the record existing) goes out
    /// with its lock.
    pub(crate) fn appending_read(&self, c: &Coordinator, tx: Tx) -> Option<u8> {
        let e = self.interactive(c, tx)?;
        (self.cfg.reads == ReadShape::RecordWithLock
            && c.version > 0
            && self.entry(tx, e).op == Op::Get)
            .then_some(e)
    }

    /// How many of the plan's requests the handle's next record write records (the record holds a
    /// prefix of the plan); nothing to write while the handle has recorded that many.
    pub(crate) fn record_target(&self, c: &Coordinator, tx: Tx) -> u8 {
        let lock_first = self.cfg.reads == ReadShape::LockThenRecord;
        match self.interactive(c, tx) {
            // Once the record exists, a read only locks.
            Some(e) if lock_first && self.entry(tx, e).op == Op::Get && c.version > 0 => c.recorded,
            // `RecordWithLock`: the append sent with the read's lock failed transiently; the read
            // is recorded by the next record write.
            Some(e) if c.append_failed == Some(e) => c.recorded,
            Some(e) => e + 1,
            // Only held reads left unrecorded: the commit records nothing for them (its
            // per-item writes release them, conditional on our lock). Not with `RecordWithLock`,
            // whose reads record themselves: one left unrecorded (its append failed
            // transiently) is recorded by the commit, as with `RecordThenLock`.
            None if lock_first
                && c.version > 0
                && (c.recorded..c.known).all(|e| {
                    self.entry(tx, e).op == Op::Get
                        && matches!(c.items[e as usize], Knows::Locked { .. })
                }) =>
            {
                c.recorded
            }
            None => c.known,
        }
    }

    /// The item's lock is named by the first `requests` requests of its transaction's record.
    pub(crate) fn covered(&self, tx: Tx, i: usize, requests: u8) -> bool {
        self.recorded_op(tx, i, requests).is_some()
    }

    /// `tx` reads the item under lock interactively: with `LockThenRecord` or `RecordWithLock`,
    /// its lock may land before the record names it.
    pub(crate) fn reads_now(&self, tx: Tx, i: usize) -> bool {
        self.plan(tx)
            .entries
            .iter()
            .any(|e| e.item == i && e.op == Op::Get && e.now)
    }

    pub(crate) fn fresh_coordinator(&self, tx: Tx) -> Coordinator {
        let n = self.plan(tx).entries.len();
        Coordinator {
            phase: Phase::Running,
            resumed: None,
            version: 0,
            recorded: 0,
            known: n as u8,
            items: vec![Knows::Nothing; n],
            header_ok: false,
            image_saved: vec![false; n],
            fast_failed: false,
            locks_written: 0,
            batch_done: false,
            batch_absent: None,
            pre_read: None,
            in_doubt: false,
            append_failed: None,
            reads: vec![None; n],
            unrecorded_lock: None,
        }
    }

    /// The ghost commit point: the record's writes take effect in the logical state.
    pub(crate) fn commit_ghost(&self, s: &mut State, k: Slot, requests: u8) {
        let tx = self.tx_of(k);
        // Every read of the transaction still holds: the one this handle made and every recorded
        // one (a handle whose read was never recorded is told its requests were left out).
        for (j, c) in s.coordinators.iter().enumerate() {
            if self.tx_of(j as Slot) != tx {
                continue;
            }
            for (e, read) in c.reads.iter().enumerate() {
                let item = self.entry(tx, e as u8).item;
                if let Some(v) = read
                    && (j == k as usize || (e as u8) < requests)
                    && *v != s.logical[item]
                {
                    s.stale_read = true;
                }
            }
        }
        for e in &self.plan(tx).entries[..requests as usize] {
            s.logical[e.item] = e.op.apply(s.logical[e.item]);
        }
        s.commits[tx as usize] += 1;
        if s.coordinators[k as usize].resumed.is_some() {
            s.resumed_commit = true;
        }
    }

    /// Some one-request transaction writes an item it read earlier (the folded commit's shape).
    pub(crate) fn writes_after_reads(&self) -> bool {
        self.cfg.txs.iter().any(|p| {
            p.commit == CommitPath::OneRequest
                // One item without record: committed without a record.
                && !single_item_on_demand(p)
                && p.entries.iter().enumerate().any(|(i, e)| {
                    e.op.is_write()
                        && p.entries[..i]
                            .iter()
                            .any(|r| r.item == e.item && r.op == Op::Get)
                })
        })
    }

    /// `RecordWithLock` with a lost response to spend, and a plan with an interactive read after
    /// another interactive request (once the record exists): a read's append may fail.
    pub(crate) fn appends_may_fail(&self) -> bool {
        self.cfg.reads == ReadShape::RecordWithLock
            && self.cfg.lost_responses > 0
            && self.cfg.txs.iter().any(|p| {
                // The second read of a plan without record goes with the record's creation.
                !p.on_demand
                    && p.entries.iter().enumerate().any(|(i, e)| {
                        e.now && e.op == Op::Get && p.entries[..i].iter().any(|x| x.now)
                    })
            })
    }

    /// Some transaction takes its locks in one batch.
    pub(crate) fn batches(&self) -> bool {
        self.cfg.txs.iter().any(|p| p.batch_lock)
    }

    /// A batched plan writes an item that starts absent.
    pub(crate) fn batch_may_insert(&self) -> bool {
        self.cfg.txs.iter().filter(|p| p.batch_lock).any(|p| {
            p.entries
                .iter()
                .any(|e| e.op.is_write() && self.cfg.items[e.item].is_none())
        })
    }

    pub(crate) fn decide_allowed(&self, r: &Record, version: u8) -> bool {
        r.state == TxState::Pending
            && (r.version == version || self.cfg.bug == Some(Bug::DecideIgnoresVersion))
    }

    /// The coordinator found its record decided or gone: the call returns (`RolledBack`,
    /// `AlreadyCommitted`, `UnknownOutcome`); its own late locks are settled by the world, as
    /// `finish_decided` / `release_own_locks` do.
    pub(crate) fn done(s: &mut State, k: Slot) {
        s.coordinators[k as usize].phase = Phase::Done;
    }

    /// `absorb_conflict` / `merge_record` after a failed conditional write on the record: learn what
    /// happened. A pending record's requests are adopted (`merge_record`).
    pub(crate) fn absorb(&self, s: &mut State, k: Slot) {
        let tx = self.tx_of(k);
        match s.records[tx as usize] {
            Some(r) if r.state == TxState::Pending => {
                // The record's requests become this handle's (another handle may have appended
                // some): it locks and applies them too before deciding.
                let c = &mut s.coordinators[k as usize];
                c.version = r.version;
                c.recorded = r.requests;
                c.known = c.known.max(r.requests);
            }
            _ => Self::done(s, k),
        }
    }

    /// `LockInfo::from_observed`: a lock attempt found our own lock (an earlier attempt landed, or
    /// another handle of the transaction took it).
    pub(crate) fn knows_from(it: &Item) -> Knows {
        let applied = it.applied != Applied::No;
        Knows::Locked {
            applied,
            transient: it.transient,
            before: if it.transient {
                None
            } else if applied {
                it.image
            } else {
                it.data
            },
            image_ref: it.image_ref,
            stamp: it.stamp.expect("a lock has a stamp"),
            roll: it.roll,
        }
    }

    /// An applied lock of `tx`, or one whose write is still to roll forward, is on the item.
    pub(crate) fn unsettled_lock(s: &State, tx: Tx, i: usize) -> bool {
        s.items[i].owner == Some(tx) && (s.items[i].applied != Applied::No || s.items[i].roll)
    }

    pub(crate) fn clear_lock(it: &mut Item) {
        it.owner = None;
        it.transient = false;
        it.applied = Applied::No;
        it.image = None;
        it.image_ref = false;
        it.stamp = None;
        it.late = false;
        it.roll = false;
    }

    /// `release_write`: delete a placeholder, or remove the lock attributes.
    pub(crate) fn release(it: &mut Item) {
        if it.transient {
            *it = Item::unlocked(None);
        } else {
            Self::clear_lock(it);
        }
    }

    /// What a reader at `Committed` isolation gets for an item (`isolation::resolve`):
    /// `Ok(None)` absent, `Ok(Some(data))` an item; `Err` when it cannot tell.
    pub(crate) fn committed_view(
        &self,
        s: &State,
        i: usize,
    ) -> Result<Option<Option<u8>>, &'static str> {
        let it = &s.items[i];
        let Some(owner) = it.owner else {
            return Ok(it.present.then_some(it.data));
        };
        if it.applied == Applied::No && it.roll {
            // `rolled_forward`: the write's result once its transaction committed.
            return match s.records[owner as usize] {
                None => Err("a lock to roll forward whose record is gone"),
                Some(r) if r.state == TxState::Committed => {
                    match self.recorded_op(owner, i, r.requests) {
                        Some(op) if op.is_write() => Ok(op.apply(it.data).map(Some)),
                        _ => Err("a lock to roll forward whose record names no write"),
                    }
                }
                Some(_) => Ok(it.visible()),
            };
        }
        if it.applied == Applied::No {
            return Ok(it.visible());
        }
        match s.records[owner as usize] {
            None => Err("an applied lock whose record is gone"),
            Some(r) if r.state == TxState::Committed => {
                if it.applied == Applied::DeleteMark {
                    Ok(None)
                } else {
                    Ok(it.visible())
                }
            }
            Some(_) => {
                if it.applied == Applied::DeleteMark {
                    Ok(it.visible())
                } else if it.transient {
                    Ok(None)
                } else if let Some(img) = it.image {
                    Ok(Some(Some(img)))
                } else if it.image_ref {
                    match s.images[owner as usize][i] {
                        Some(img) => Ok(Some(Some(img))),
                        None => Err("the images-table image of an applied item is missing"),
                    }
                } else {
                    Err("an applied item carries no before-image")
                }
            }
        }
    }

    pub(crate) fn quiescent_and_clean(&self, s: &State) -> bool {
        s.items.iter().all(|it| it.owner.is_none())
            && s.images.iter().flatten().all(Option::is_none)
            && s.records
                .iter()
                .all(|r| r.is_none() || !self.cfg.delete_records)
            && s.records.iter().flatten().all(|r| r.finalized)
            && s.items
                .iter()
                .zip(&s.logical)
                .all(|(it, l)| it.present == l.is_some() && (!it.present || it.data == *l))
            && s.coordinators.iter().all(|c| c.phase == Phase::Done)
    }
}

/// A plan with `record_on_demand` whose entries are all on one item: it commits without a record.
pub(crate) fn single_item_on_demand(p: &Plan) -> bool {
    p.on_demand && p.entries.iter().all(|e| e.item == p.entries[0].item)
}
