//! What a run checks: the transactions' requests and commit paths, the faults allowed, the
//! deliberate bugs, and the helpers that build a [`Config`].

pub(crate) type Tx = u8;
/// A coordinator slot: `0..n` the handles that began the transactions, `n..2n` second handles
/// made by `resume` while the first may still be running.
pub(crate) type Slot = u8;

/// A request of a transaction on one item.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Op {
    /// PutItem with `v = x`.
    Put(u8),
    /// UpdateItem `SET v = if_not_exists(v, 0) + 1`.
    Update,
    /// DeleteItem.
    Delete,
    /// A locked read (`Transaction::get_item`). With `Entry::now` the caller gets the item at
    /// once (an interactive read); otherwise the item is only locked at commit.
    Get,
}

impl Op {
    pub(crate) fn is_write(self) -> bool {
        self != Op::Get
    }

    /// The item's data after the request, given it before (`None`: absent).
    pub(crate) fn apply(self, before: Option<u8>) -> Option<u8> {
        match self {
            Op::Put(x) => Some(x),
            Op::Update => Some(before.map_or(1, |v| v + 1)),
            Op::Delete => None,
            Op::Get => before,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum CommitPath {
    /// `Transaction::commit_one_shot`: one TransactWriteItems flips, applies and unlocks.
    OneRequest,
    /// `Transaction::commit_phased`: apply batches, flip, unlock, finalize.
    Phased,
}

/// How an interactive locked read (`Transaction::get_item`) reaches its lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadShape {
    /// The read's request is recorded (record create or append) and then the item is locked: two
    /// round trips per read.
    RecordThenLock,
    /// Once the record exists, a read only locks its item (one round trip); its request joins the
    /// record with the next record write (the commit's), and a one-request commit that has only
    /// held reads left to record records nothing. The first read of a transaction without a record
    /// sends the record's creation and its lock together (either may land first); whoever releases
    /// a lock whose record is absent puts a tombstone first, on which the creation fails. A lock
    /// its record does not name is treated as a late lock once the transaction is decided, and
    /// never released while it is pending.
    LockThenRecord,
    /// The first read of a transaction without a record is `LockThenRecord`'s (the record's
    /// creation and the lock in flight together). Every later read sends the record's append
    /// (its request and any other unrecorded one, conditional on the version) and its lock
    /// together, one round trip; they land in either order, and the read returns once both
    /// answered. An append that finds the transaction decided leaves the lock to be released like
    /// a late one; an append that fails transiently leaves the read unrecorded until the next
    /// record write (the commit's, which records every request). A lock landed before its append
    /// is one its record does not name, under `LockThenRecord`'s rules.
    RecordWithLock,
}

#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub(crate) item: usize,
    pub(crate) op: Op,
    /// Applied at once, as a write asking for `ALL_NEW` is (`Transaction::apply_now`).
    pub(crate) now: bool,
}

#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub(crate) entries: Vec<Entry>,
    pub(crate) commit: CommitPath,
    /// Try the write-only fast path first (`Transaction::commit_write_only`).
    pub(crate) fast: bool,
    /// Write the record and lock every item in one TransactWriteItems (`Settings::batch_locks`),
    /// falling back to the per-item path when it is cancelled. Buffered entries only.
    pub(crate) batch_lock: bool,
    /// `Settings::roll_forward` (phased, batched plans only): the batch marks each write's lock
    /// (`_TxU`), and a marked write is not applied before the flip but by the write that settles
    /// its item after the commit (the model's writes are all known to succeed).
    pub(crate) roll_forward: bool,
    /// With `roll_forward`: the puts carry a condition only DynamoDB judges, so they are applied
    /// before the flip (with their before-images) although their locks are marked.
    pub(crate) roll_applies_puts: bool,
    /// `Settings::record_on_demand`: the first interactive read (of a transaction whose earlier
    /// entries are all on its item) takes its lock alone, with no record; a plan whose entries are
    /// all on that item commits with one conditional write on it (`CommitWithoutRecord`), never
    /// writing a record; any other plan creates its record with its next record write.
    pub(crate) on_demand: bool,
}

/// Deliberately broken variants of the protocol, to show the invariants catch real bugs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bug {
    /// The Java library's bug: the placeholder of an absent item is written without checking the
    /// item is still absent, so an item created meanwhile is marked transient (and deleted by a
    /// rollback). Here in the per-item lock and in a batch's placeholders alike.
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
    /// The naive batched lock: a lock inside TransactWriteItems returns nothing on success, so the
    /// before-images are read (BatchGetItem) *before* the batch, whose locks are conditional only
    /// on the items being unlocked. A write committed between the read and the lock is lost when
    /// the transaction rolls back.
    BatchImagesReadBeforeLock,
    /// `LockThenRecord` (the first read's lock sent together with the record's creation) where a
    /// contender (or the sweeper) that meets a lock whose record is absent releases it without
    /// first putting a tombstone: the record's creation may land after the release.
    OrphanReleaseWithoutTombstone,
    /// `LockThenRecord` where a contender that meets a lock its pending record does not name
    /// releases it as a stray.
    ReleaseUnrecordedLock,
    /// Roll-forward without the lock's mark: whoever settles a committed transaction applies the
    /// write of every unapplied lock it finds, a late lock (taken after the write was rolled
    /// forward and the item unlocked) included.
    RollForwardIgnoresMark,
    /// Roll-forward marks set by per-item lock writes too, which are not conditional on the
    /// record: one that lands late (after the write was rolled forward and the item unlocked)
    /// marks the item for a second application.
    RollMarkOnPerItemLock,
    /// `record_on_demand` whose commit without record is conditional only on the item not being
    /// locked by another transaction (`attribute_not_exists(_TxId) OR _TxId = me`), not on our own
    /// lock: after a contender released our lock under a tombstone and wrote the item, the commit
    /// still lands, on a value the read never saw.
    CommitWithoutRecordIgnoresLock,
}

#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub(crate) name: &'static str,
    /// Initial data of each item (`None`: absent).
    pub(crate) items: Vec<Option<u8>>,
    /// Items too large to embed their before-image: it goes to the images table.
    pub(crate) big: Vec<bool>,
    pub(crate) txs: Vec<Plan>,
    pub(crate) crashes: u8,
    pub(crate) lost_responses: u8,
    /// A second handle may resume a transaction while its first coordinator still runs (a paused
    /// process that comes back, or two processes resuming the same id).
    pub(crate) second_handles: Vec<Tx>,
    /// Finalized records may be deleted (the sweeper's `delete_after`, TTL, `Transaction::delete`).
    pub(crate) delete_records: bool,
    pub(crate) reads: ReadShape,
    pub(crate) bug: Option<Bug>,
}

pub(crate) fn entry(item: usize, op: Op) -> Entry {
    Entry {
        item,
        op,
        now: false,
    }
}

/// An interactive locked read: the caller gets the item before it goes on.
pub(crate) fn read_now(item: usize) -> Entry {
    Entry {
        item,
        op: Op::Get,
        now: true,
    }
}

pub(crate) fn plan(commit: CommitPath, entries: Vec<Entry>) -> Plan {
    Plan {
        entries,
        commit,
        fast: false,
        batch_lock: false,
        roll_forward: false,
        roll_applies_puts: false,
        on_demand: false,
    }
}

/// A plan with `Settings::record_on_demand`.
pub(crate) fn on_demand(commit: CommitPath, entries: Vec<Entry>) -> Plan {
    Plan {
        on_demand: true,
        ..plan(commit, entries)
    }
}

/// A plan whose record and locks go in one TransactWriteItems first.
pub(crate) fn batched(commit: CommitPath, entries: Vec<Entry>) -> Plan {
    assert!(
        entries.iter().all(|e| !e.now),
        "only buffered writes are locked in a batch"
    );
    Plan {
        batch_lock: true,
        ..plan(commit, entries)
    }
}

/// A batched phased plan whose writes roll forward past the commit (`Settings::roll_forward`).
pub(crate) fn rolled(entries: Vec<Entry>) -> Plan {
    Plan {
        roll_forward: true,
        ..batched(CommitPath::Phased, entries)
    }
}

/// A configuration with one crash and one lost response, records deleted once finalized.
pub(crate) fn config(
    name: &'static str,
    items: Vec<Option<u8>>,
    big: Vec<bool>,
    txs: Vec<Plan>,
) -> Config {
    Config {
        name,
        items,
        big,
        txs,
        crashes: 1,
        lost_responses: 1,
        second_handles: vec![],
        delete_records: true,
        reads: ReadShape::RecordThenLock,
        bug: None,
    }
}
