//! Decide and settle: the one place where a decided transaction is driven to its end (every item
//! settled, images deleted, record finalized) and where a transaction judged idle is rolled back.
//!
//! Every coordinator goes through here: a [`Transaction`](crate::Transaction) handle settling its
//! own commit or rollback, contention completing the transaction that holds a needed item,
//! [`TransactionManager::complete_transaction`](crate::TransactionManager::complete_transaction)
//! and the sweeper. It works on the record (header and requests) and the shared context, never on
//! a handle, so it sits below contention and the coordinator.

mod batch;
mod complete;
mod entry;

/// Bounded retries of protocol loops (record conflicts, lost locks, lost conditions).
pub(crate) const PROTOCOL_ATTEMPTS: usize = 8;

pub(crate) use batch::{cancelled_error, group_by_owner, group_with_owners};
pub(crate) use complete::{
    complete, release_unapplied_lock, release_unapplied_locks, release_without_record,
};
pub(crate) use entry::{Entry, Items, index};

use crate::TxId;
use crate::error::{Error, Result};
use crate::record::{self, JudgedRollback, Record, RecordMeta, TxState};
use crate::request::Request;
use crate::settings::Inner;

/// A transaction as its record says: the version read and the requests, indexed by item.
struct Recorded {
    meta: RecordMeta,
    requests: Vec<Request>,
    items: Items,
}

impl Recorded {
    fn of(rec: Record) -> Recorded {
        let mut items = Items::new();
        for i in 0..rec.requests.len() {
            index(&mut items, &rec.requests, i);
        }
        Recorded {
            meta: rec.header.meta(),
            requests: rec.requests,
            items,
        }
    }
}

/// Drives the decided transaction `id` to completion (releasing every lock), even if its record
/// says it is finalized (a slow coordinator may have locked an item after the decision). Returns
/// its state; a pending transaction is left alone.
///
/// # Errors
/// [`Error::TransactionNotFound`] if it has no record.
pub(crate) async fn complete_transaction(inner: &Inner, id: &TxId) -> Result<TxState> {
    let rec = record::load(&inner.client, &inner.tx_table, id)
        .await?
        .ok_or_else(|| Error::TransactionNotFound { tx_id: id.clone() })?;
    let decided = rec.header.state;
    if decided == TxState::Pending {
        return Ok(TxState::Pending);
    }
    let mut r = Recorded::of(rec);
    complete(inner, id, &mut r.items, &r.requests, decided, false).await?;
    Ok(decided)
}

/// The sweeper's rollback of a transaction it judged idle on `rec`: decided only if the record is
/// still at the version and last-update time it judged (`judged_updated_ms`), then completed.
/// `false` when the transaction moved on since (an append or heartbeat: it is alive) and was left
/// alone. [`Error::AlreadyCommitted`] if it committed meanwhile (its completion is driven).
pub(crate) async fn roll_back_idle(
    inner: &Inner,
    id: &TxId,
    rec: Record,
    judged_updated_ms: u64,
) -> Result<bool> {
    let mut r = Recorded::of(rec);
    let judged = record::Judged {
        version: r.meta.version,
        idle_since: Some(judged_updated_ms),
        younger_than: None,
        gated: r.meta.gated,
    };
    match record::roll_back_judged(&inner.client, &inner.tx_table, id, &judged, None).await? {
        JudgedRollback::Decided => {
            crate::metrics::rolled_back(crate::metrics::SWEEPER);
            complete(
                inner,
                id,
                &mut r.items,
                &r.requests,
                TxState::RolledBack,
                false,
            )
            .await?;
            Ok(true)
        }
        // (Only a contender's rollback checks a decider or can be cancelled.)
        JudgedRollback::Changed(None)
        | JudgedRollback::DeciderNotPending
        | JudgedRollback::Cancelled(_) => Err(Error::UnknownOutcome { tx_id: id.clone() }),
        JudgedRollback::Changed(Some(h)) => match h.state {
            TxState::Pending => Ok(false),
            TxState::RolledBack => {
                finish_decided(inner, id, &mut r, TxState::RolledBack).await?;
                Ok(true)
            }
            TxState::Committed => {
                finish_decided(inner, id, &mut r, TxState::Committed).await?;
                Err(Error::AlreadyCommitted { tx_id: id.clone() })
            }
        },
    }
}

/// Drives a transaction found decided to completion unless its record is finalized, with the
/// record's requests as they are now.
async fn finish_decided(
    inner: &Inner,
    id: &TxId,
    r: &mut Recorded,
    decided: TxState,
) -> Result<()> {
    let c = &inner.client;
    // Gone or finalized: nothing is left to settle (a record view holds no locks of its own).
    let Some(h) = record::load_header(c, &inner.tx_table, id).await? else {
        return Ok(());
    };
    if h.finalized {
        return Ok(());
    }
    if r.meta.version != h.version {
        let rec = record::load(c, &inner.tx_table, id)
            .await?
            .ok_or_else(|| Error::UnknownOutcome { tx_id: id.clone() })?;
        *r = Recorded::of(rec);
    }
    complete(inner, id, &mut r.items, &r.requests, decided, false).await
}
