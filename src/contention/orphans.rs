//! Locks whose owner is decided or gone: completing a decided owner met at an item, and
//! releasing the unapplied lock of an owner whose record is absent once a tombstone (or the record
//! turning up decided) settles that it will never commit. Used by contenders and the sweeper.

use tracing::debug;

use crate::TxId;
use crate::error::{Error, Item, Result};
use crate::item_lock::{self, Observed};
use crate::record::{self, TxState};
use crate::settings::Inner;
use crate::settle::{self, PROTOCOL_ATTEMPTS};

/// Drives the decided transaction `owner` to completion (releasing its lock on the item).
pub(super) async fn complete_decided(
    inner: &Inner,
    owner: &TxId,
    table: &str,
    key: &Item,
) -> Result<()> {
    // Also when finalized: its lock on this item may have been taken late.
    match settle::complete_transaction(inner, owner).await {
        // Completion settles the items the record names; a lock still there is one it does not
        // name (a read's lock whose request was never recorded) or a late one: never applied,
        // released like a vanished transaction's.
        Ok(TxState::Committed | TxState::RolledBack) => {
            steal_orphan(inner, owner, table, key, true, None).await
        }
        Ok(_) | Err(Error::UnknownOutcome { .. }) => Ok(()),
        Err(Error::TransactionNotFound { .. }) => {
            steal_orphan(inner, owner, table, key, false, None).await
        }
        Err(e) => Err(e),
    }
}

/// The owner's record is absent (or `decided` says it was found decided), and its lock is on the
/// item. The lock is released only once the owner is decided: a lock whose record is absent may be
/// a read's lock sent with its record's creation, so a tombstone goes first (see
/// [`record::put_tombstone`]); if the record exists after all and is pending, nothing is released
/// and the caller judges the owner again. An applied lock of a vanished transaction cannot be
/// judged automatically. `decider`: see [`decide_absent`].
pub(crate) async fn steal_orphan(
    inner: &Inner,
    owner: &TxId,
    table: &str,
    key: &Item,
    decided: bool,
    decider: Option<&TxId>,
) -> Result<()> {
    let c = &inner.client;
    let raw = crate::ddb::batch_get(c, &[(table.to_string(), key.clone())]).await?;
    let obs = Observed::of(raw.first().map(|(_, i)| i));
    if !obs.locked_by(owner) {
        return Ok(());
    }
    if obs.applied {
        return Err(Error::ItemLocked {
            table: table.to_string(),
            key: key.clone(),
            owner: owner.clone(),
        });
    }
    let tombstoned = if decided {
        false
    } else {
        match decide_absent(inner, owner, decider).await? {
            AbsentOwner::Undecided => return Ok(()),
            found => found == AbsentOwner::Tombstoned,
        }
    };
    debug!(other = %owner, table, "releasing the lock of a transaction whose record is gone");
    let mut w = orphan_release_write(inner, table, key, &obs, owner, tombstoned);
    if inner.settings.queues() {
        // A decided record may hold waiters registered for this lock (a read's lock it does not
        // name): the release carries them, as every unlock does.
        let (own, registered) = record::load_registrations(c, &inner.tx_table, owner).await?;
        item_lock::queue::carry_merged(&mut w, &obs.queue, &registered, (table, key), own);
    }
    w.send(c, None).await?;
    Ok(())
}

/// The release of `owner`'s unapplied lock (`obs`) on an item, its record gone. A lock taken
/// without a record (it carries `_TxK`) whose owner was just `tombstoned` has no record and never
/// will, so this release is all the owner did there: it is marked with the owner's id for the
/// change feed (where writes are marked), as the owner's own rollback's release is, so that the
/// feed does not hold the item back waiting for a record.
pub(crate) fn orphan_release_write(
    inner: &Inner,
    table: &str,
    key: &Item,
    obs: &Observed,
    owner: &TxId,
    tombstoned: bool,
) -> crate::ddb::Write {
    let mut w = item_lock::release_write(table, key, obs.transient, false, owner);
    if tombstoned && obs.ticket.is_some() && inner.marks_writes_to(table) {
        item_lock::mark_made(&mut w, owner);
    }
    w
}

/// What [`decide_absent`] found of a transaction whose record was absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AbsentOwner {
    /// Its tombstone is in place (ours, or one put before): it has no record and never will.
    Tombstoned,
    /// Its record exists after all, decided.
    Decided,
    /// Its record exists pending, or the tombstone was cancelled for a transient reason: the
    /// caller judges it again.
    Undecided,
}

/// Decides a transaction whose record was found absent by putting its tombstone: whether it is
/// decided now, and how ([`AbsentOwner`]).
///
/// `decider`: the contending transaction that judged the owner (by its lock, or for want of a
/// record): the tombstone lands only while the decider's record is pending, and
/// `Err(RolledBack)` says it no longer is. A transaction without record, or the sweeper, passes
/// `None`.
pub(crate) async fn decide_absent(
    inner: &Inner,
    owner: &TxId,
    decider: Option<&TxId>,
) -> Result<AbsentOwner> {
    let ttl = inner.settings.record_ttl_secs();
    let (c, table) = (&inner.client, &inner.tx_table);
    let mut attempt = 0;
    loop {
        attempt += 1;
        match record::put_tombstone(c, table, owner, ttl, decider).await {
            Ok(record::Tombstoned::Put) => {
                debug!(other = %owner, "tombstoned a transaction without a record");
                return Ok(AbsentOwner::Tombstoned);
            }
            Ok(record::Tombstoned::Exists(h)) if h.state == TxState::Pending => {
                return Ok(AbsentOwner::Undecided);
            }
            Ok(record::Tombstoned::Exists(_)) => return Ok(AbsentOwner::Decided),
            Ok(record::Tombstoned::DeciderNotPending) => {
                let tx_id = decider.expect("only a decider is checked").clone();
                return Err(Error::RolledBack { tx_id });
            }
            Ok(record::Tombstoned::Cancelled) => return Ok(AbsentOwner::Undecided),
            // The tombstone may have landed: putting it again finds it.
            Err(Error::DynamoDb {
                ambiguous: true, ..
            }) if attempt < PROTOCOL_ATTEMPTS => {}
            Err(e) => return Err(e),
        }
    }
}
