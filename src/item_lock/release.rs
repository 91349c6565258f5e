//! Settling an item: releasing an unapplied lock, and the write that settles an item of a decided
//! transaction (unlock after commit; restore the before-image, or delete a transient item, after
//! rollback).

use crate::TxId;
use crate::ddb::{Placeholders, Write, WriteKind};
use crate::error::{Error, Item, Result};
use crate::request::Op;

use super::{LOCK_ATTRS, Observed, applied_condition, me_condition};

/// Releases an item whose transaction write is not applied: deletes a placeholder, or removes the lock.
pub(crate) fn release_write(
    table: &str,
    key: &Item,
    transient: bool,
    applied: bool,
    me: &TxId,
) -> Write {
    let mut ph = Placeholders::default();
    let cond = format!(
        "{} AND {}",
        me_condition(&mut ph, me),
        applied_condition(&mut ph, applied)
    );
    let kind = if transient {
        WriteKind::Delete { key: key.clone() }
    } else {
        let names: Vec<String> = LOCK_ATTRS.iter().map(|a| ph.name(a)).collect();
        WriteKind::Update {
            key: key.clone(),
            update: format!("REMOVE {}", names.join(", ")),
        }
    };
    Write {
        table: table.into(),
        kind,
        condition: Some(cond),
        ph,
    }
}

/// The write that settles an item of a decided transaction, given what the item looks like now.
/// `None` when there is nothing to do (not locked by `me`). `op` is the transaction's request kind for
/// the item (its write if it has one, else `Get`). `table_image` is the before-image loaded from the
/// images table, when the item points there.
pub(crate) fn settle_write(
    committed: bool,
    op: Op,
    table: &str,
    key: &Item,
    obs: &Observed,
    me: &TxId,
    table_image: Option<&Item>,
) -> Result<Option<Write>> {
    if !obs.locked_by(me) {
        return Ok(None);
    }
    let mut ph = Placeholders::default();
    let cond = format!(
        "{} AND {}",
        me_condition(&mut ph, me),
        applied_condition(&mut ph, obs.applied)
    );
    let is_delete = op == Op::Delete || obs.applied_delete;
    let kind = if committed {
        if !obs.applied && obs.roll.is_some() {
            // Its write is still to be applied: `roll_forward_write`, never a release.
            return Err(Error::invariant(format!(
                "an item of {table} to roll forward for {me} was about to be released"
            )));
        }
        if !obs.applied {
            // A read lock, or a lock taken after the decision by a late coordinator: every write of
            // a committed transaction was applied (or marked) before the decision.
            return Ok(Some(release_write(table, key, obs.transient, false, me)));
        } else if is_delete {
            WriteKind::Delete { key: key.clone() }
        } else {
            let names: Vec<String> = LOCK_ATTRS.iter().map(|a| ph.name(a)).collect();
            WriteKind::Update {
                key: key.clone(),
                update: format!("REMOVE {}", names.join(", ")),
            }
        }
    } else if !obs.applied {
        return Ok(Some(release_write(table, key, obs.transient, false, me)));
    } else if is_delete {
        // A marked delete changed nothing: release.
        return Ok(Some(release_write(table, key, obs.transient, true, me)));
    } else if obs.transient {
        WriteKind::Delete { key: key.clone() }
    } else {
        let image = match (&obs.image, &obs.image_ref) {
            (Some(img), _) => img.clone(),
            (None, Some(id)) => table_image.cloned().ok_or_else(|| {
                Error::invariant(format!(
                    "the before-image {id} of an item of {table} locked by {me} is missing"
                ))
            })?,
            (None, None) => {
                return Err(Error::invariant(format!(
                    "an item of {table} applied by {me} carries no before-image"
                )));
            }
        };
        // Restoring the image removes the lock in the same write.
        WriteKind::Put { item: image }
    };
    Ok(Some(Write {
        table: table.into(),
        kind,
        condition: Some(cond),
        ph,
    }))
}
