//! Contention between transactions: what a coordinator does when an item it needs is locked by
//! another transaction.

use std::time::Duration;

use rand::Rng;
use tracing::debug;

use crate::TxId;
use crate::error::{Error, Item, Result};
use crate::item_lock::{self, Observed};
use crate::manager::{Settings, TransactionManager};
use crate::record::{self, TxState};

/// How a transaction treats another, pending transaction that holds an item it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ContentionPolicy {
    /// Roll the other transaction back at once, whatever its age (the Java library's behaviour).
    /// Competing coordinators can roll each other back repeatedly under heavy contention.
    #[default]
    RollBackOthers,
}

/// Resolves a lock held by `owner` on an item `me` needs: decides the owner if it is pending (per the
/// policy) and completes it, so that the item is released.
pub(crate) async fn resolve(
    mgr: &TransactionManager,
    me: &TxId,
    owner: &TxId,
    table: &str,
    key: &Item,
) -> Result<()> {
    let inner = &mgr.inner;
    let header = record::load_header(&inner.client, &inner.tx_table, owner).await?;
    match header {
        None => steal_orphan(mgr, owner, table, key).await,
        Some(h) if h.state == TxState::Pending => match inner.settings.contention {
            ContentionPolicy::RollBackOthers => {
                debug!(tx = %me, other = %owner, "rolling back a contending transaction");
                match mgr.rollback_transaction(owner).await {
                    Ok(())
                    | Err(Error::AlreadyCommitted { .. })
                    | Err(Error::UnknownOutcome { .. }) => Ok(()),
                    Err(Error::TransactionNotFound { .. }) => {
                        steal_orphan(mgr, owner, table, key).await
                    }
                    Err(e) => Err(e),
                }
            }
        },
        // Decided: finish it (also when finalized: its lock on this item may have been taken late).
        Some(_) => match mgr.complete_transaction(owner).await {
            Ok(_) | Err(Error::UnknownOutcome { .. }) => Ok(()),
            Err(Error::TransactionNotFound { .. }) => steal_orphan(mgr, owner, table, key).await,
            Err(e) => Err(e),
        },
    }
}

/// The owner's record is gone. Its lock can be released if its write was never applied; an applied
/// write of a vanished transaction cannot be judged automatically.
async fn steal_orphan(
    mgr: &TransactionManager,
    owner: &TxId,
    table: &str,
    key: &Item,
) -> Result<()> {
    let c = &mgr.inner.client;
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
    debug!(other = %owner, table, "releasing the lock of a transaction whose record is gone");
    let w = item_lock::release_write(table, key, obs.transient, false, owner);
    w.send(c, None).await?;
    Ok(())
}

/// Sleeps before retry `attempt` (0-based): full jitter over an exponentially growing window.
pub(crate) async fn backoff(settings: &Settings, attempt: u32) {
    let cap = settings.backoff_max.as_micros() as u64;
    let window = (settings.backoff_base.as_micros() as u64)
        .saturating_mul(1u64 << attempt.min(20))
        .min(cap)
        .max(1);
    let us = rand::rng().random_range(0..=window);
    tokio::time::sleep(Duration::from_micros(us)).await;
}
