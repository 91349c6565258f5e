//! The model's state: items with their lock attributes, TX records, images, coordinators, and the
//! ghost state the invariants read.

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Applied {
    No,
    /// `_TxA = "1"`.
    Yes,
    /// `_TxA = "D"`: a delete, marked before a phased flip.
    DeleteMark,
}

/// An item as stored, lock attributes included.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Item {
    /// The row exists (a placeholder is a row).
    pub(crate) present: bool,
    /// The user's data attribute (`None` on a placeholder).
    pub(crate) data: Option<u8>,
    /// `_TxId`.
    pub(crate) owner: Option<Tx>,
    /// `_TxT`.
    pub(crate) transient: bool,
    /// `_TxA`.
    pub(crate) applied: Applied,
    /// `_TxG`: the embedded before-image (its data).
    pub(crate) image: Option<u8>,
    /// `_TxI`: the before-image is in the images table under (owner, item).
    pub(crate) image_ref: bool,
    /// `_TxD`, the lock's stamp, unique per lock write: here, the coordinator slot that wrote the
    /// lock and how many locks that slot had written before.
    pub(crate) stamp: Option<(Slot, u8)>,
    /// Ghost: the lock landed after its transaction was decided (a late lock). A completer reads
    /// every item after the decision, so it sees (and settles) every lock taken before it.
    pub(crate) late: bool,
    /// `_TxU`: a batched lock marked the owner's write of this item to roll forward.
    pub(crate) roll: bool,
}

impl Item {
    pub(crate) fn unlocked(data: Option<u8>) -> Item {
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
            roll: false,
        }
    }

    /// `Observed::visible`: the item as committed state shows it, ignoring the lock. (Before the
    /// model check, a placeholder with a marked delete showed as an item holding only its key.)
    pub(crate) fn visible(&self) -> Option<Option<u8>> {
        let holds_item = !self.transient || self.applied == Applied::Yes;
        (self.present && holds_item).then_some(self.data)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum TxState {
    Pending,
    Committed,
    RolledBack,
}

/// The header row of a TX record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Record {
    pub(crate) state: TxState,
    /// `_TxV`.
    pub(crate) version: u8,
    /// `_TxR`: the plan's first `requests` entries.
    pub(crate) requests: u8,
    /// `_TxF`.
    pub(crate) finalized: bool,
}

/// What a coordinator knows about one of its items.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Knows {
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
        /// The lock carries `_TxU`.
        roll: bool,
    },
    /// Locked by the batched TransactWriteItems, which returns nothing on success: the lock's
    /// stamp is known, the before-image is not (read after the lock when an apply needs it).
    Batched {
        stamp: (Slot, u8),
        roll: bool,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Intent {
    Commit,
    Rollback,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Phase {
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
pub(crate) struct Coordinator {
    pub(crate) phase: Phase,
    /// `Some` for a handle made by `resume`.
    pub(crate) resumed: Option<Intent>,
    /// `RecordMeta::version` (0: no record written yet).
    pub(crate) version: u8,
    /// Requests known to be in the record.
    pub(crate) recorded: u8,
    /// Entries of the plan this handle knows (a resumed one knows the record's).
    pub(crate) known: u8,
    pub(crate) items: Vec<Knows>,
    /// The record was read pending before the apply of the current interactive entry.
    pub(crate) header_ok: bool,
    pub(crate) image_saved: Vec<bool>,
    pub(crate) fast_failed: bool,
    /// Lock writes this slot has sent (for unique stamps).
    pub(crate) locks_written: u8,
    /// The batched record-and-lock request was answered (success or cancellation): from now on
    /// the per-item path.
    pub(crate) batch_done: bool,
    /// The batch was cancelled only because items were absent: sent once more with a placeholder
    /// lock for the items absent then (`true`).
    pub(crate) batch_absent: Option<Vec<bool>>,
    /// `Bug::BatchImagesReadBeforeLock` only: the items' data as read before the batch.
    pub(crate) pre_read: Option<Vec<Option<u8>>>,
    /// A creation of the record was sent and its answer lost (`record_in_doubt`): the record is
    /// read, never created again, and a later read locks only after the record is known.
    pub(crate) in_doubt: bool,
    /// `RecordWithLock`: the append sent with this interactive read's lock failed transiently
    /// (its answer lost, landed or not): the read returns once its lock answered, its request
    /// left to the next record write.
    pub(crate) append_failed: Option<u8>,
    /// Ghost: what each interactive read returned to this handle's caller (`Some(None)`: absent).
    pub(crate) reads: Vec<Option<Option<u8>>>,
    /// `record_on_demand`: the entry whose read took its lock without a record (until the record
    /// is created).
    pub(crate) unrecorded_lock: Option<u8>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct State {
    pub(crate) items: Vec<Item>,
    pub(crate) records: Vec<Option<Record>>,
    /// A tombstone under the transaction's id (`record::put_tombstone`): for everything but the
    /// record's creation, which fails on it, the record is absent. Never deleted here (the
    /// implementation keeps it long past any creation it trusts).
    pub(crate) tombstones: Vec<bool>,
    /// The images table: (transaction, item) -> before-image data.
    pub(crate) images: Vec<Vec<Option<u8>>>,
    pub(crate) coordinators: Vec<Coordinator>,
    /// DynamoDB's memory of a fast-path ClientRequestToken that succeeded.
    pub(crate) tokens: Vec<bool>,
    /// The same for the batched record-and-lock request: the stamp its locks carry.
    pub(crate) batch_tokens: Vec<Option<(Slot, u8)>>,
    pub(crate) crashes_left: u8,
    pub(crate) lost_left: u8,
    // Ghost state, for the invariants only.
    pub(crate) logical: Vec<Option<u8>>,
    pub(crate) commits: Vec<u8>,
    pub(crate) resumed_commit: bool,
    /// A batched record-and-lock request was cancelled and the transaction went on item by item.
    pub(crate) batch_fell_back: bool,
    /// A batched lock inserted a placeholder for an absent item.
    pub(crate) batch_placeholder: bool,
    /// A write rolled forward was applied by the write that settled its item.
    pub(crate) rolled_forward: bool,
    /// A one-request commit recorded requests itself (`fold_into_decision`).
    pub(crate) folded_commit: bool,
    /// A record's creation failed on a tombstone.
    pub(crate) creation_refused: bool,
    /// A transaction committed with one write on its item, without a record.
    pub(crate) committed_without_record: bool,
    /// A commit without record found its lock released (under a tombstone).
    pub(crate) commit_without_record_refused: bool,
    /// A transaction committed while an item one of its handles read under lock (a recorded read,
    /// or one the committing handle made) no longer held what the read returned.
    pub(crate) stale_read: bool,
}
