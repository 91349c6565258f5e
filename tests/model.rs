//! An exhaustive model check of the transaction protocol, with the `stateright` model checker.
//!
//! The model is the protocol of docs/PROTOCOL.md at the level of single DynamoDB requests: every
//! action below is one request (a conditional write is atomic in DynamoDB, so it is one step), and
//! each names the implementation step it stands for. The checker explores every interleaving of:
//!
//! - the coordinators of 2–3 transactions over 2–3 items (buffered or interactive writes, the
//!   one-request and the phased commit, the write-only fast path, read locks, inserts of absent
//!   items, deletes, large items whose before-image lives in the images table);
//! - crashes of a coordinator between any two of its requests, and resumption of its transaction
//!   by a new coordinator (`TransactionManager::resume`) that commits or rolls it back;
//! - lost responses (the write landed, the coordinator did not hear back and retries the step);
//! - everybody else — contending coordinators, the sweeper, readers — as the "world": at any moment
//!   it may roll back any pending transaction (a contender's wound, `dead_after`, the sweeper, a
//!   skewed clock), settle any item of a decided transaction, finalize, delete records and images,
//!   release the unapplied locks of a vanished transaction.
//!
//! World actions are atomic compare-and-set steps whose guards are at most as strict as the
//! implementation's conditions, so the model has *more* behaviours than the implementation: an
//! invariant that holds here holds there (for the modelled sizes). Time is not modelled: every
//! rollback a clock could trigger may happen at any moment.
//!
//! Invariants (checked in every reachable state):
//! - **committed reads**: what a reader at `Committed` isolation computes for every item (the
//!   rules of `isolation::resolve`) equals the logical state: the initial items with the writes of
//!   exactly the committed transactions applied, each once, at its commit point. This is atomicity
//!   (all or nothing), isolation of committed reads, and "no lost image" in one statement;
//! - **no lost image**: an applied item of an undecided or rolled-back transaction always carries
//!   its before-image, or points to one that exists in the images table;
//! - **locks are covered by records**: an item locked by a transaction is named in its record, or
//!   the record is gone and the lock was never applied;
//! - **finalized means settled**: a finalized record has no applied lock left;
//! - **committed state is immutable**: a transaction that committed stays committed (its record
//!   is committed or gone) and commits at most once;
//! - **quiescent states are clean**: when nothing can move any more, no item is locked, no image
//!   is left, every record is gone and every item holds its logical value.
//!
//! `sometimes` properties prove the interesting states are reached (late locks, restores from the
//! images table, resumed commits, lost responses), and `buggy_protocols_are_caught` runs the same
//! checker on deliberately broken variants (Java's transient-lock bug, a decision not conditional
//! on the version, finalizing or deleting images too early, releasing an applied lock) and expects
//! a counterexample for each.
//!
//! Not modelled: the wait/wound choices of the ordered contention policy (they only decide *when*
//! a pending holder is rolled back, and the world may roll back at any time), user
//! `ConditionExpression`s, chunk rows of large records, ticket bookkeeping.

mod model_support;

use stateright::{Checker, Expectation, Model, Property};

type Tx = u8;
/// A coordinator slot: `0..n` the handles that began the transactions, `n..2n` second handles
/// made by `resume` while the first may still be running.
type Slot = u8;

/// A request of a transaction on one item.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Op {
    /// PutItem with `v = x`.
    Put(u8),
    /// UpdateItem `SET v = if_not_exists(v, 0) + 1`.
    Update,
    /// DeleteItem.
    Delete,
    /// A read with `IsolationLevel::ReadLock`.
    Get,
}

impl Op {
    fn is_write(self) -> bool {
        self != Op::Get
    }

    /// The item's data after the request, given it before (`None`: absent).
    fn apply(self, before: Option<u8>) -> Option<u8> {
        match self {
            Op::Put(x) => Some(x),
            Op::Update => Some(before.map_or(1, |v| v + 1)),
            Op::Delete => None,
            Op::Get => before,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum CommitPath {
    /// `Transaction::commit_one_shot`: one TransactWriteItems flips, applies and unlocks.
    OneRequest,
    /// `Transaction::commit_phased`: apply batches, flip, unlock, finalize.
    Phased,
}

#[derive(Clone, Debug)]
struct Entry {
    item: usize,
    op: Op,
    /// Applied at once, as a write asking for `ALL_NEW` is (`Transaction::apply_now`).
    now: bool,
}

#[derive(Clone, Debug)]
struct Plan {
    entries: Vec<Entry>,
    commit: CommitPath,
    /// Try the write-only fast path first (`Transaction::commit_write_only`).
    fast: bool,
}

/// Deliberately broken variants of the protocol, to show the invariants catch real bugs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bug {
    /// The Java library's bug: the placeholder of an absent item is written without checking the
    /// item is still absent, so an item created meanwhile is marked transient (and deleted by a
    /// rollback).
    PlaceholderWithoutAbsentCheck,
    /// The decision is conditional on the state only, not on the record's version.
    DecideIgnoresVersion,
    /// The record is finalized without checking every item was settled.
    FinalizeBeforeSettle,
    /// Images-table images are deleted as soon as the transaction is decided.
    DeleteImageBeforeSettle,
    /// Applies are conditional on the lock's owner only, not on its stamp (before the model check
    /// found that a second handle's late lock let a stale apply land).
    ApplyIgnoresLockStamp,
    /// Settling a rolled-back item releases it without looking at the applied flag (a release
    /// conditional on the owner only, sent after a stale read).
    ReleaseIgnoresApplied,
}

#[derive(Clone, Debug)]
struct Config {
    name: &'static str,
    /// Initial data of each item (`None`: absent).
    items: Vec<Option<u8>>,
    /// Items too large to embed their before-image: it goes to the images table.
    big: Vec<bool>,
    txs: Vec<Plan>,
    crashes: u8,
    lost_responses: u8,
    /// A second handle may resume a transaction while its first coordinator still runs (a paused
    /// process that comes back, or two processes resuming the same id).
    second_handles: Vec<Tx>,
    /// Finalized records may be deleted (the sweeper's `delete_after`, TTL, `Transaction::delete`).
    delete_records: bool,
    bug: Option<Bug>,
}

// ------------------------------------------------------------------------------------------------
// State

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Applied {
    No,
    /// `_TxA = "1"`.
    Yes,
    /// `_TxA = "D"`: a delete, marked before a phased flip.
    DeleteMark,
}

/// An item as stored, lock attributes included.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Item {
    /// The row exists (a placeholder is a row).
    present: bool,
    /// The user's data attribute (`None` on a placeholder).
    data: Option<u8>,
    /// `_TxId`.
    owner: Option<Tx>,
    /// `_TxT`.
    transient: bool,
    /// `_TxA`.
    applied: Applied,
    /// `_TxG`: the embedded before-image (its data).
    image: Option<u8>,
    /// `_TxI`: the before-image is in the images table under (owner, item).
    image_ref: bool,
    /// `_TxD`, the lock's stamp, unique per lock write: here, the coordinator slot that wrote the
    /// lock and how many locks that slot had written before.
    stamp: Option<(Slot, u8)>,
    /// Ghost: the lock landed after its transaction was decided (a late lock). A completer reads
    /// every item after the decision, so it sees (and settles) every lock taken before it.
    late: bool,
}

impl Item {
    fn unlocked(data: Option<u8>) -> Item {
        Item {
            present: data.is_some(),
            data,
            owner: None,
            transient: false,
            applied: Applied::No,
            image: None,
            image_ref: false,
            stamp: None,
            late: false,
        }
    }

    /// `Observed::visible`: the item as committed state shows it, ignoring the lock. (Before the
    /// model check, a placeholder with a marked delete showed as an item holding only its key.)
    fn visible(&self) -> Option<Option<u8>> {
        let holds_item = !self.transient || self.applied == Applied::Yes;
        (self.present && holds_item).then_some(self.data)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum TxState {
    Pending,
    Committed,
    RolledBack,
}

/// The header row of a TX record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Record {
    state: TxState,
    /// `_TxV`.
    version: u8,
    /// `_TxR`: the plan's first `requests` entries.
    requests: u8,
    /// `_TxF`.
    finalized: bool,
}

/// What a coordinator knows about one of its items.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Knows {
    Nothing,
    /// The lock of an existing item failed because it is absent: insert a placeholder next.
    Absent,
    /// `LockInfo`.
    Locked {
        applied: bool,
        transient: bool,
        before: Option<u8>,
        image_ref: bool,
        stamp: (Slot, u8),
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Intent {
    Commit,
    Rollback,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Phase {
    /// A second handle not made yet.
    Idle,
    Running,
    /// The call returned (whatever its outcome).
    Done,
    /// Crashed; its transaction can be resumed.
    Dead,
}

/// A coordinator: the `Transaction` handle of the application that began the transaction, or of
/// one that resumed it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Coordinator {
    phase: Phase,
    /// `Some` for a handle made by `resume`.
    resumed: Option<Intent>,
    /// `RecordMeta::version` (0: no record written yet).
    version: u8,
    /// Requests known to be in the record.
    recorded: u8,
    /// Entries of the plan this handle knows (a resumed one knows the record's).
    known: u8,
    items: Vec<Knows>,
    /// The record was read pending before the apply of the current interactive entry.
    header_ok: bool,
    image_saved: Vec<bool>,
    fast_failed: bool,
    /// Lock writes this slot has sent (for unique stamps).
    locks_written: u8,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    items: Vec<Item>,
    records: Vec<Option<Record>>,
    /// The images table: (transaction, item) -> before-image data.
    images: Vec<Vec<Option<u8>>>,
    coordinators: Vec<Coordinator>,
    /// DynamoDB's memory of a fast-path ClientRequestToken that succeeded.
    tokens: Vec<bool>,
    crashes_left: u8,
    lost_left: u8,
    // Ghost state, for the invariants only.
    logical: Vec<Option<u8>>,
    commits: Vec<u8>,
    resumed_commit: bool,
}

// ------------------------------------------------------------------------------------------------
// Actions

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Action {
    /// `commit_write_only`: one TransactWriteItems creating the record committed and applying every
    /// write, each conditional on its item not being locked (idempotent by its request token).
    FastCommit { c: Slot, lost: bool },
    /// `record::create` / `record::append` (from `Transaction::flush`): PutItem / UpdateItem of the
    /// header conditional on absence / `_TxS = P AND _TxV = v`.
    Record { c: Slot, lost: bool },
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
    /// `contention::steal_orphan` / the sweeper: the record is gone, release an unapplied lock.
    ReleaseOrphan { tx: Tx, item: u8 },
}

/// What the next step of a running coordinator is.
enum Next {
    Fast,
    Record,
    Lock(Vec<u8>),
    SaveImage(Vec<u8>),
    ReadHeader,
    Apply(Vec<u8>),
    CommitOneRequest,
    Flip,
    RollBack,
}

struct ProtocolModel {
    cfg: Config,
}

impl ProtocolModel {
    fn tx_of(&self, k: Slot) -> Tx {
        let n = self.cfg.txs.len() as Slot;
        if k < n {
            k
        } else {
            self.cfg.second_handles[(k - n) as usize]
        }
    }

    fn plan(&self, tx: Tx) -> &Plan {
        &self.cfg.txs[tx as usize]
    }

    fn entry(&self, tx: Tx, e: u8) -> &Entry {
        &self.plan(tx).entries[e as usize]
    }

    /// The entry of `tx`'s plan that concerns `item` among the first `n` (what a completer learns
    /// from the record's requests).
    fn recorded_op(&self, tx: Tx, item: usize, n: u8) -> Option<Op> {
        self.plan(tx).entries[..n as usize]
            .iter()
            .find(|e| e.item == item)
            .map(|e| e.op)
    }

    fn needs_table_image(&self, tx: Tx, e: u8, k: &Knows) -> bool {
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

    fn next_step(&self, s: &State, k: Slot) -> Next {
        let tx = self.tx_of(k);
        let c = &s.coordinators[k as usize];
        let plan = self.plan(tx);
        if c.resumed == Some(Intent::Rollback) {
            return Next::RollBack;
        }
        if plan.fast && c.resumed.is_none() && c.version == 0 && !c.fast_failed {
            return Next::Fast;
        }
        let n = c.known;
        let held = |e: u8| matches!(c.items[e as usize], Knows::Locked { .. });
        let applied = |e: u8| matches!(c.items[e as usize], Knows::Locked { applied: true, .. });
        // Interactive writes are recorded, locked and applied one by one, in order.
        let now = (0..n).find(|&e| c.resumed.is_none() && self.entry(tx, e).now && !applied(e));
        let target = now.map_or(n, |e| e + 1);
        if c.recorded < target {
            return Next::Record;
        }
        if let Some(e) = now {
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
        let unlocked: Vec<u8> = (0..n).filter(|&e| !held(e)).collect();
        if !unlocked.is_empty() {
            return Next::Lock(unlocked);
        }
        match plan.commit {
            CommitPath::OneRequest => Next::CommitOneRequest,
            CommitPath::Phased => {
                let todo: Vec<u8> = (0..n)
                    .filter(|&e| self.entry(tx, e).op.is_write() && !applied(e))
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

    fn fresh_coordinator(&self, tx: Tx) -> Coordinator {
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
        }
    }

    /// The ghost commit point: the record's writes take effect in the logical state.
    fn commit_ghost(&self, s: &mut State, k: Slot, requests: u8) {
        let tx = self.tx_of(k);
        for e in &self.plan(tx).entries[..requests as usize] {
            s.logical[e.item] = e.op.apply(s.logical[e.item]);
        }
        s.commits[tx as usize] += 1;
        if s.coordinators[k as usize].resumed.is_some() {
            s.resumed_commit = true;
        }
    }

    fn decide_allowed(&self, r: &Record, version: u8) -> bool {
        r.state == TxState::Pending
            && (r.version == version || self.cfg.bug == Some(Bug::DecideIgnoresVersion))
    }

    /// The coordinator found its record decided or gone: the call returns (`RolledBack`,
    /// `AlreadyCommitted`, `UnknownOutcome`); its own late locks are settled by the world, as
    /// `finish_decided` / `release_own_locks` do.
    fn done(s: &mut State, k: Slot) {
        s.coordinators[k as usize].phase = Phase::Done;
    }

    /// `absorb_conflict` / `merge_record` after a failed conditional write on the record: learn what
    /// happened. A pending record's requests are adopted (`merge_record`).
    fn absorb(&self, s: &mut State, k: Slot) {
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
    fn knows_from(it: &Item) -> Knows {
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
        }
    }

    fn clear_lock(it: &mut Item) {
        it.owner = None;
        it.transient = false;
        it.applied = Applied::No;
        it.image = None;
        it.image_ref = false;
        it.stamp = None;
        it.late = false;
    }

    /// `release_write`: delete a placeholder, or remove the lock attributes.
    fn release(it: &mut Item) {
        if it.transient {
            *it = Item::unlocked(None);
        } else {
            Self::clear_lock(it);
        }
    }

    /// What a reader at `Committed` isolation gets for an item (`isolation::resolve`):
    /// `Ok(None)` absent, `Ok(Some(data))` an item; `Err` when it cannot tell.
    fn committed_view(&self, s: &State, i: usize) -> Result<Option<Option<u8>>, &'static str> {
        let it = &s.items[i];
        let Some(owner) = it.owner else {
            return Ok(it.present.then_some(it.data));
        };
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

    fn quiescent_and_clean(&self, s: &State) -> bool {
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

    // --------------------------------------------------------------------------------------------
    // Coordinator steps

    fn fast_commit(&self, s: &mut State, k: Slot, lost: bool) -> bool {
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
        let free =
            s.records[t].is_none() && plan.entries.iter().all(|e| s.items[e.item].owner.is_none());
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

    fn record(&self, s: &mut State, k: Slot, lost: bool) -> bool {
        let tx = self.tx_of(k);
        let t = tx as usize;
        let c = s.coordinators[k as usize].clone();
        let now = (0..c.known).find(|&e| {
            c.resumed.is_none()
                && self.entry(tx, e).now
                && !matches!(c.items[e as usize], Knows::Locked { applied: true, .. })
        });
        let target = now.map_or(c.known, |e| e + 1);
        match (c.version, s.records[t]) {
            // Create, conditional on attribute_not_exists(_TxId).
            (0, None) => {
                s.records[t] = Some(Record {
                    state: TxState::Pending,
                    version: 1,
                    requests: target,
                    finalized: false,
                });
                if !lost {
                    let c = &mut s.coordinators[k as usize];
                    c.version = 1;
                    c.recorded = target;
                }
            }
            // Append, conditional on `_TxS = P AND _TxV = v`.
            (v, Some(r)) if v > 0 && r.state == TxState::Pending && r.version == v => {
                s.records[t] = Some(Record {
                    version: v + 1,
                    requests: target,
                    ..r
                });
                if !lost {
                    let c = &mut s.coordinators[k as usize];
                    c.version = v + 1;
                    c.recorded = target;
                }
            }
            // The condition failed: ALL_OLD shows our own earlier write (same nonce), another
            // handle's append, or a decision.
            (_, Some(_)) if !lost => self.absorb(s, k),
            // An append to a vanished record: `UnknownOutcome` (late locks released by the world).
            (v, None) if v > 0 && !lost => Self::done(s, k),
            _ => return false,
        }
        true
    }

    fn lock(&self, s: &mut State, k: Slot, e: u8, lost: bool) -> bool {
        let tx = self.tx_of(k);
        let t = tx as usize;
        let i = self.entry(tx, e).item;
        let it = s.items[i];
        let knows = s.coordinators[k as usize].items[e as usize];
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
            Knows::Locked { .. } => return false,
        };
        if s.items[i].owner == Some(tx) && !mine {
            if counted {
                s.coordinators[k as usize].locks_written += 1;
            }
            s.items[i].late = s.records[t].is_none_or(|r| r.state != TxState::Pending);
        }
        if !lost {
            s.coordinators[k as usize].items[e as usize] = new_knows;
        }
        true
    }

    fn read_header(&self, s: &mut State, k: Slot) -> bool {
        let tx = self.tx_of(k);
        match s.records[tx as usize] {
            Some(r) if r.state == TxState::Pending => s.coordinators[k as usize].header_ok = true,
            _ => Self::done(s, k),
        }
        true
    }

    fn save_image(&self, s: &mut State, k: Slot, e: u8) -> bool {
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

    fn apply(&self, s: &mut State, k: Slot, e: u8, lost: bool) -> bool {
        let tx = self.tx_of(k);
        let t = tx as usize;
        let entry = self.entry(tx, e).clone();
        let i = entry.item;
        let Knows::Locked {
            transient,
            before,
            stamp,
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
            };
            s.coordinators[k as usize].header_ok = false;
        }
        true
    }

    fn commit_one_request(&self, s: &mut State, k: Slot, lost: bool) -> bool {
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
        // Every item's final write is conditional on our lock and the applied flag we know.
        for e in 0..c.known {
            let i = self.entry(tx, e).item;
            let Knows::Locked { applied, .. } = c.items[e as usize] else {
                return false;
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
            let Knows::Locked { applied, .. } = c.items[e as usize] else {
                unreachable!()
            };
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
        s.records[t] = Some(Record {
            state: TxState::Committed,
            finalized: true,
            ..r
        });
        self.commit_ghost(s, tx, r.requests);
        if !lost {
            Self::done(s, k);
        }
        true
    }

    fn decide(&self, s: &mut State, k: Slot, to: TxState, lost: bool) -> bool {
        let tx = self.tx_of(k);
        let t = tx as usize;
        let version = s.coordinators[k as usize].version;
        match s.records[t] {
            Some(r) if self.decide_allowed(&r, version) => {
                s.records[t] = Some(Record { state: to, ..r });
                Self::mark_decided(s, tx);
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

    fn resume(&self, s: &mut State, k: Slot, intent: Intent) -> bool {
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
                };
            }
            // Decided: `resume` + `commit`/`rollback` complete it (the world's settle actions);
            // gone: `TransactionNotFound`.
            _ => Self::done(s, k),
        }
        true
    }

    // --------------------------------------------------------------------------------------------
    // World steps

    fn settle(&self, s: &mut State, tx: Tx, i: usize) -> bool {
        let t = tx as usize;
        let Some(r) = s.records[t] else {
            return false;
        };
        if r.state == TxState::Pending || s.items[i].owner != Some(tx) {
            return false;
        }
        let Some(op) = self.recorded_op(tx, i, r.requests) else {
            return false; // not the record's item: the invariant "locks are covered" reports it
        };
        let committed = r.state == TxState::Committed;
        let image = s.images[t][i];
        let it = &mut s.items[i];
        let is_delete = op == Op::Delete || it.applied == Applied::DeleteMark;
        if it.applied == Applied::No {
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
    /// the decision, so a completer (which reads the items after the decision) will find it.
    fn mark_decided(s: &mut State, tx: Tx) {
        for it in s.items.iter_mut().filter(|it| it.owner == Some(tx)) {
            it.late = false;
        }
    }

    /// An applied lock of `tx` is still on the item.
    fn applied_lock(s: &State, tx: Tx, i: usize) -> bool {
        s.items[i].owner == Some(tx) && s.items[i].applied != Applied::No
    }

    fn delete_image(&self, s: &mut State, tx: Tx, i: usize) -> bool {
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

    fn finalize(&self, s: &mut State, tx: Tx) -> bool {
        let t = tx as usize;
        let Some(r) = s.records[t] else {
            return false;
        };
        // `complete` read every item after the decision and settled what it found locked; only
        // locks taken later (late locks, never applied) can remain.
        let settled = (0..s.items.len()).all(|i| {
            !Self::applied_lock(s, tx, i) && (s.items[i].owner != Some(tx) || s.items[i].late)
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

impl Model for ProtocolModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let n = self.cfg.txs.len();
        let items = self.cfg.items.len();
        vec![State {
            items: self.cfg.items.iter().map(|&d| Item::unlocked(d)).collect(),
            records: vec![None; n],
            images: vec![vec![None; items]; n],
            coordinators: (0..n as Tx)
                .map(|t| self.fresh_coordinator(t))
                .chain(self.cfg.second_handles.iter().map(|&t| Coordinator {
                    phase: Phase::Idle,
                    ..self.fresh_coordinator(t)
                }))
                .collect(),
            tokens: vec![false; n],
            crashes_left: self.cfg.crashes,
            lost_left: self.cfg.lost_responses,
            logical: self.cfg.items.clone(),
            commits: vec![0; n],
            resumed_commit: false,
        }]
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        let n = self.cfg.txs.len() as Tx;
        for k in 0..s.coordinators.len() as Slot {
            let tx = self.tx_of(k);
            let c = &s.coordinators[k as usize];
            match c.phase {
                Phase::Done => continue,
                Phase::Dead | Phase::Idle => {
                    for intent in [Intent::Commit, Intent::Rollback] {
                        out.push(Action::Resume { c: k, intent });
                    }
                    continue;
                }
                Phase::Running => {}
            }
            if s.crashes_left > 0 {
                out.push(Action::Crash { c: k });
            }
            let lost_options: &[bool] = if s.lost_left > 0 {
                &[false, true]
            } else {
                &[false]
            };
            for &lost in lost_options {
                match self.next_step(s, k) {
                    Next::Fast => out.push(Action::FastCommit { c: k, lost }),
                    Next::Record => out.push(Action::Record { c: k, lost }),
                    Next::Lock(es) => {
                        out.extend(
                            es.into_iter()
                                .map(|entry| Action::Lock { c: k, entry, lost }),
                        )
                    }
                    Next::SaveImage(es) if !lost => out.extend(
                        es.into_iter()
                            .map(|entry| Action::SaveImage { c: k, entry }),
                    ),
                    Next::SaveImage(_) => {}
                    Next::ReadHeader if !lost => out.push(Action::ReadHeader { c: k }),
                    Next::ReadHeader => {}
                    Next::Apply(es) => {
                        for entry in es {
                            let needs_image =
                                self.needs_table_image(tx, entry, &c.items[entry as usize])
                                    && !c.image_saved[entry as usize];
                            if needs_image {
                                if !lost {
                                    out.push(Action::SaveImage { c: k, entry });
                                }
                            } else {
                                out.push(Action::Apply { c: k, entry, lost });
                            }
                        }
                    }
                    Next::CommitOneRequest => out.push(Action::CommitOneRequest { c: k, lost }),
                    Next::Flip => out.push(Action::Flip { c: k, lost }),
                    Next::RollBack => out.push(Action::RollBack { c: k, lost }),
                }
            }
        }
        for tx in 0..n {
            let t = tx as usize;
            match s.records[t] {
                Some(r) if r.state == TxState::Pending => out.push(Action::WorldRollBack { tx }),
                Some(r) => {
                    for item in 0..s.items.len() as u8 {
                        if s.items[item as usize].owner == Some(tx) {
                            out.push(Action::Settle { tx, item });
                        }
                    }
                    if !r.finalized {
                        out.push(Action::Finalize { tx });
                    } else if self.cfg.delete_records {
                        out.push(Action::DeleteRecord { tx });
                    }
                }
                None => {
                    for item in 0..s.items.len() as u8 {
                        let it = &s.items[item as usize];
                        if it.owner == Some(tx) && it.applied == Applied::No {
                            out.push(Action::ReleaseOrphan { tx, item });
                        }
                    }
                }
            }
            for item in 0..s.items.len() as u8 {
                if s.images[t][item as usize].is_some() {
                    out.push(Action::DeleteImage { tx, item });
                }
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        let changed = match action {
            Action::FastCommit { c, lost } => self.fast_commit(&mut s, c, lost),
            Action::Record { c, lost } => self.record(&mut s, c, lost),
            Action::Lock { c, entry, lost } => self.lock(&mut s, c, entry, lost),
            Action::ReadHeader { c } => self.read_header(&mut s, c),
            Action::SaveImage { c, entry } => self.save_image(&mut s, c, entry),
            Action::Apply { c, entry, lost } => self.apply(&mut s, c, entry, lost),
            Action::CommitOneRequest { c, lost } => self.commit_one_request(&mut s, c, lost),
            Action::Flip { c, lost } => self.decide(&mut s, c, TxState::Committed, lost),
            Action::RollBack { c, lost } => self.decide(&mut s, c, TxState::RolledBack, lost),
            Action::Crash { c } => {
                s.crashes_left -= 1;
                s.coordinators[c as usize].phase = Phase::Dead;
                true
            }
            Action::Resume { c, intent } => self.resume(&mut s, c, intent),
            Action::WorldRollBack { tx } => {
                let r = s.records[tx as usize]?;
                s.records[tx as usize] = Some(Record {
                    state: TxState::RolledBack,
                    ..r
                });
                Self::mark_decided(&mut s, tx);
                true
            }
            Action::Settle { tx, item } => self.settle(&mut s, tx, item as usize),
            Action::DeleteImage { tx, item } => self.delete_image(&mut s, tx, item as usize),
            Action::Finalize { tx } => self.finalize(&mut s, tx),
            Action::DeleteRecord { tx } => {
                s.records[tx as usize] = None;
                true
            }
            Action::ReleaseOrphan { item, .. } => {
                Self::release(&mut s.items[item as usize]);
                true
            }
        };
        let lost = matches!(
            action,
            Action::FastCommit { lost: true, .. }
                | Action::Record { lost: true, .. }
                | Action::Lock { lost: true, .. }
                | Action::Apply { lost: true, .. }
                | Action::CommitOneRequest { lost: true, .. }
                | Action::Flip { lost: true, .. }
                | Action::RollBack { lost: true, .. }
        );
        if lost {
            s.lost_left -= 1;
        }
        (changed && s != *last).then_some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "committed reads see exactly the committed writes",
                |m: &ProtocolModel, s: &State| {
                    (0..s.items.len()).all(|i| m.committed_view(s, i) == Ok(s.logical[i].map(Some)))
                },
            ),
            Property::always("no lost image", |_: &ProtocolModel, s: &State| {
                s.items.iter().enumerate().all(|(i, it)| match it.owner {
                    Some(t) if it.applied == Applied::Yes && !it.transient => {
                        let decided_commit =
                            s.records[t as usize].is_some_and(|r| r.state == TxState::Committed);
                        decided_commit
                            || it.image.is_some()
                            || (it.image_ref && s.images[t as usize][i].is_some())
                    }
                    _ => true,
                })
            }),
            Property::always(
                "locks are covered by records",
                |m: &ProtocolModel, s: &State| {
                    s.items.iter().enumerate().all(|(i, it)| match it.owner {
                        None => !it.transient && it.applied == Applied::No,
                        Some(t) => match s.records[t as usize] {
                            Some(r) => m.recorded_op(t, i, r.requests).is_some(),
                            None => it.applied == Applied::No,
                        },
                    })
                },
            ),
            Property::always("finalized means settled", |_: &ProtocolModel, s: &State| {
                s.records.iter().enumerate().all(|(t, r)| {
                    !r.is_some_and(|r| r.finalized)
                        || (0..s.items.len()).all(|i| !Self::applied_lock(s, t as Tx, i))
                })
            }),
            Property::always(
                "committed state is immutable",
                |_: &ProtocolModel, s: &State| {
                    s.commits.iter().enumerate().all(|(t, &n)| {
                        n <= 1
                            && (n == 0
                                || s.records[t].is_none_or(|r| r.state == TxState::Committed))
                    })
                },
            ),
            Property::always(
                "quiescent states are clean",
                |m: &ProtocolModel, s: &State| {
                    !m.next_states(s).is_empty() || m.quiescent_and_clean(s)
                },
            ),
            Property::sometimes(
                "every transaction commits",
                |_: &ProtocolModel, s: &State| s.commits.iter().all(|&n| n == 1),
            ),
            Property::sometimes(
                "a late lock of a decided transaction",
                |_: &ProtocolModel, s: &State| {
                    s.items.iter().any(|it| {
                        it.owner.is_some_and(|t| {
                            it.applied == Applied::No
                                && s.records[t as usize]
                                    .is_some_and(|r| r.state != TxState::Pending)
                        })
                    })
                },
            ),
            Property::sometimes(
                "an applied item of a rolled-back transaction",
                |_: &ProtocolModel, s: &State| {
                    s.items.iter().any(|it| {
                        it.owner.is_some_and(|t| {
                            it.applied == Applied::Yes
                                && s.records[t as usize]
                                    .is_some_and(|r| r.state == TxState::RolledBack)
                        })
                    })
                },
            ),
            Property::sometimes(
                "a resumed coordinator commits",
                |m: &ProtocolModel, s: &State| m.cfg.crashes == 0 || s.resumed_commit,
            ),
            Property::sometimes("a lost response", |m: &ProtocolModel, s: &State| {
                m.cfg.lost_responses == 0
                    || (s.lost_left < m.cfg.lost_responses && s.commits.contains(&1))
            }),
        ]
    }
}

// ------------------------------------------------------------------------------------------------
// Configurations

fn entry(item: usize, op: Op) -> Entry {
    Entry {
        item,
        op,
        now: false,
    }
}

fn plan(commit: CommitPath, entries: Vec<Entry>) -> Plan {
    Plan {
        entries,
        commit,
        fast: false,
    }
}

/// A configuration with one crash and one lost response, records deleted once finalized.
fn config(name: &'static str, items: Vec<Option<u8>>, big: Vec<bool>, txs: Vec<Plan>) -> Config {
    Config {
        name,
        items,
        big,
        txs,
        crashes: 1,
        lost_responses: 1,
        second_handles: vec![],
        delete_records: true,
        bug: None,
    }
}

/// Two transactions over an existing and an absent item: one commits in one request, the other in
/// phases (with a delete and an insert); one crash, one lost response.
fn two_by_two() -> Config {
    config(
        "2 tx x 2 items, one-request + phased",
        vec![Some(1), None],
        vec![false, false],
        vec![
            plan(
                CommitPath::OneRequest,
                vec![entry(0, Op::Update), entry(1, Op::Put(5))],
            ),
            plan(
                CommitPath::Phased,
                vec![entry(1, Op::Delete), entry(0, Op::Update)],
            ),
        ],
    )
}

/// An interactive transaction (an update applied at once, on a large item whose image goes to the
/// images table, then an insert) against a write-only fast-path transaction.
fn interactive_and_fast() -> Config {
    let interactive = Entry {
        item: 0,
        op: Op::Update,
        now: true,
    };
    config(
        "interactive + images table vs fast path",
        vec![Some(1), None],
        vec![true, false],
        vec![
            plan(CommitPath::Phased, vec![interactive, entry(1, Op::Put(5))]),
            Plan {
                fast: true,
                ..plan(
                    CommitPath::OneRequest,
                    vec![entry(0, Op::Put(7)), entry(1, Op::Update)],
                )
            },
        ],
    )
}

/// Three transactions over three items, with a read lock of an absent item; one crash.
fn three_by_three() -> Config {
    Config {
        lost_responses: 0,
        ..config(
            "3 tx x 3 items, read locks",
            vec![Some(1), Some(2), None],
            vec![false, true, false],
            vec![
                plan(
                    CommitPath::OneRequest,
                    vec![entry(2, Op::Get), entry(0, Op::Update)],
                ),
                plan(
                    CommitPath::Phased,
                    vec![entry(1, Op::Update), entry(2, Op::Put(5))],
                ),
                plan(
                    CommitPath::Phased,
                    vec![entry(0, Op::Delete), entry(1, Op::Put(9))],
                ),
            ],
        )
    }
}

/// The interactive transaction (appends, an immediate apply, an images-table image) while a
/// second handle may resume it at any moment, its first coordinator still running, and a one-item
/// transaction contends for the inserted item.
fn concurrent_handles() -> Config {
    let interactive = interactive_and_fast().txs.remove(0);
    Config {
        crashes: 0,
        second_handles: vec![0],
        // Records are deleted long after their coordinators stopped (`delete_after`, TTL): a
        // handle still retrying the record's creation could otherwise create it anew.
        delete_records: false,
        ..config(
            "a second handle resuming a live transaction",
            vec![Some(1), None],
            vec![true, false],
            vec![
                interactive,
                plan(CommitPath::OneRequest, vec![entry(1, Op::Update)]),
            ],
        )
    }
}

#[test]
fn second_handles_of_live_transactions() {
    assert_model_holds(concurrent_handles());
}

/// Three transactions over two items: a read lock, an insert, a delete (no crash in CI).
fn three_by_two() -> Config {
    Config {
        crashes: 0,
        lost_responses: 0,
        ..config(
            "3 tx x 2 items, read lock",
            vec![Some(1), None],
            vec![false, false],
            vec![
                plan(
                    CommitPath::OneRequest,
                    vec![entry(1, Op::Get), entry(0, Op::Update)],
                ),
                plan(
                    CommitPath::Phased,
                    vec![entry(0, Op::Update), entry(1, Op::Put(5))],
                ),
                plan(CommitPath::Phased, vec![entry(1, Op::Delete)]),
            ],
        )
    }
}

fn check(cfg: Config) -> impl Checker<ProtocolModel> {
    let bug = cfg.bug.is_some();
    model_support::check(ProtocolModel { cfg }, bug)
}

fn assert_model_holds(cfg: Config) {
    let (name, bug) = (cfg.name, cfg.bug.is_some());
    model_support::assert_model_holds(name, ProtocolModel { cfg }, bug);
}

#[test]
fn two_transactions_two_items() {
    assert_model_holds(two_by_two());
}

#[test]
fn interactive_transaction_images_table_and_fast_path() {
    assert_model_holds(interactive_and_fast());
}

#[test]
fn three_transactions_two_items() {
    assert_model_holds(three_by_two());
}

#[test]
#[ignore = "larger run (1.6M states): cargo test --release --test model -- --ignored"]
fn three_transactions_two_items_with_a_crash() {
    let mut cfg = three_by_two();
    cfg.name = "3 tx x 2 items, read lock, one crash";
    cfg.crashes = 1;
    assert_model_holds(cfg);
}

#[test]
#[ignore = "larger run (20M states, ~8 min in release): cargo test --release --test model -- --ignored"]
fn three_transactions_three_items() {
    assert_model_holds(three_by_three());
}

#[test]
#[ignore = "larger run (0.6M states): cargo test --release --test model -- --ignored"]
fn two_transactions_two_items_two_crashes_two_lost_responses() {
    let mut cfg = two_by_two();
    cfg.name = "2 tx x 2 items, two crashes, two lost responses";
    cfg.crashes = 2;
    cfg.lost_responses = 2;
    assert_model_holds(cfg);
}

#[test]
fn buggy_protocols_are_caught() {
    let cases = [
        (Bug::PlaceholderWithoutAbsentCheck, interactive_and_fast()),
        (Bug::DecideIgnoresVersion, concurrent_handles()),
        (Bug::FinalizeBeforeSettle, two_by_two()),
        (Bug::DeleteImageBeforeSettle, interactive_and_fast()),
        (Bug::ReleaseIgnoresApplied, two_by_two()),
        (Bug::ApplyIgnoresLockStamp, concurrent_handles()),
    ];
    for (bug, mut cfg) in cases {
        cfg.bug = Some(bug);
        let checker = check(cfg);
        let violated: Vec<&str> = checker
            .model()
            .properties()
            .into_iter()
            .filter(|p| p.expectation == Expectation::Always)
            .filter(|p| checker.discovery(p.name).is_some())
            .map(|p| p.name)
            .collect();
        println!("{bug:?}: caught by {violated:?}");
        assert!(!violated.is_empty(), "{bug:?} was not caught");
    }
}
