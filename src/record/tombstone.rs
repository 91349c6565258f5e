//! Tombstones: the record of a transaction whose lock was released while it had no record.
//!
//! A locked read may be sent together with its transaction's record creation
//! (`Settings::locked_reads`, unless `RecordThenLock`), so a lock whose record is absent is not always the
//! lock of a vanished transaction: its record may still be on its way. Nobody releases such a lock
//! without first putting a tombstone under the transaction's id: a header rolled back and
//! finalized, with no requests, conditional on the record's absence. If the tombstone lands, the
//! transaction is decided (rolled back) before its lock goes, and its creation, conditional on the
//! record's absence too, can never land after it: the coordinator finds the tombstone and reports
//! the transaction rolled back. If the record exists, the lock is judged like any other.
//!
//! A tombstone stands for an absent record everywhere but in the creation ([`super::load_header`]
//! and [`super::load`] return `None` for it), and is kept [`KEEP`]: a coordinator trusts a lock
//! sent with its creation only if the creation was answered within half of that (see
//! `Transaction::lock_with_creation`), so a creation that lands after a tombstone is deleted is
//! never trusted. The sweeper deletes tombstones past their time (with `delete_after`); DynamoDB
//! deletes them through the TTL attribute when TTL is on.

use std::time::Duration;

use aws_sdk_dynamodb::Client;

use crate::TxId;
use crate::ddb::{self, Placeholders, Transacted, Write, WriteKind, Written};
use crate::error::Result;
use crate::tables::TX_ID;

use super::decide::{finished_record_write, pending_check};
use super::{Header, TOMBSTONE, TxState, header_key, load_header, n};

/// How long a tombstone is kept at least.
pub(crate) const KEEP: Duration = Duration::from_secs(15 * 60);

/// Outcome of putting a tombstone.
#[derive(Debug)]
pub(crate) enum Tombstoned {
    /// The id had no record: it has a tombstone now (ours, or one put before).
    Put,
    /// The transaction's record exists: the header as found.
    Exists(Header),
    /// The deciding transaction (a contender rolling back a holder without record) is no longer
    /// pending: it decides nothing. Nothing was written.
    DeciderNotPending,
    /// Cancelled for another reason (a conflicting transaction, throttling): nothing was written.
    Cancelled,
}

/// Puts a tombstone for `id` unless its record exists. Safe to repeat (a repeat finds the
/// tombstone), and after an ambiguous failure (the tombstone found is as good as ours).
///
/// With `decider` (a contender rolling back a holder it judged by its lock), only while the
/// decider's own record is pending: one `TransactWriteItems` with a condition check on that record,
/// as for the wound of a holder with a record (`roll_back_judged`), so that a transaction rolled
/// back after it judged carries nothing out.
pub(crate) async fn put_tombstone(
    client: &Client,
    table: &str,
    id: &TxId,
    ttl_secs: Option<u64>,
    decider: Option<&TxId>,
) -> Result<Tombstoned> {
    let now = ddb::now_millis();
    let keep_ms = KEEP.as_millis() as u64;
    let ttl = ttl_secs.unwrap_or(0).max(KEEP.as_secs());
    let mut w = finished_record_write(table, id, TxState::RolledBack, Some(ttl));
    if let WriteKind::Put { item } = &mut w.kind {
        item.insert(TOMBSTONE.into(), n(now + keep_ms));
    }
    let found = match decider {
        None => match w.send(client, None).await? {
            Written::Ok(_) => return Ok(Tombstoned::Put),
            Written::ConditionFailed(found) => found,
        },
        Some(d) => match ddb::transact(client, &[pending_check(table, d), w]).await? {
            Transacted::Ok => return Ok(Tombstoned::Put),
            Transacted::Cancelled(reasons) if reasons[0].is_condition_failed() => {
                return Ok(Tombstoned::DeciderNotPending);
            }
            Transacted::Cancelled(mut reasons) if reasons[1].is_condition_failed() => {
                reasons.swap_remove(1).item
            }
            Transacted::Cancelled(_) => return Ok(Tombstoned::Cancelled),
        },
    };
    let found = match found {
        Some(found) => Header::parse(&found)?,
        // The answer did not carry the row: read it.
        None => {
            match load_header(client, table, id).await? {
                Some(h) => h,
                // A tombstone (hidden by `load_header`), or a record deleted since.
                None => return Ok(Tombstoned::Put),
            }
        }
    };
    Ok(if found.tombstone {
        Tombstoned::Put
    } else {
        Tombstoned::Exists(found)
    })
}

/// Deletes the tombstone of `id` if its time is over by `now_ms`. Returns whether it was
/// deleted (false: kept, or not a tombstone).
pub(crate) async fn delete_tombstone(
    client: &Client,
    table: &str,
    id: &TxId,
    now_ms: u64,
) -> Result<bool> {
    let mut ph = Placeholders::default();
    let cond = format!(
        "attribute_exists({id_attr}) AND {t} < {now}",
        id_attr = ph.name(TX_ID),
        t = ph.name(TOMBSTONE),
        now = ph.value("Now", n(now_ms)),
    );
    let w = Write {
        table: table.into(),
        kind: WriteKind::Delete {
            key: header_key(id),
        },
        condition: Some(cond),
        ph,
    };
    match w.send(client, None).await? {
        Written::Ok(_) => Ok(true),
        Written::ConditionFailed(_) => Ok(false),
    }
}
