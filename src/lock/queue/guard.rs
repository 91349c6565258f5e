//! A place in the queue (`Enqueued`) and a held lock (`QueueGuard`).

use std::sync::Arc;
use std::time::Duration;

use super::Inner;
use super::entry::{delete_own, spawn_delete};
use crate::lock::LockError;
use crate::lock::heartbeat::{Heartbeat, LostSignal};

/// An entry in the queue, not yet granted. Dropping it removes the entry in the background.
pub(super) struct Enqueued {
    pub(super) inner: Arc<Inner>,
    pub(super) name: String,
    pub(super) sk: String,
    pub(super) ticket: u64,
    pub(super) owner: String,
    pub(super) heartbeat: Option<Heartbeat>,
    pub(super) armed: bool,
}

impl Enqueued {
    pub(super) fn into_guard(mut self) -> QueueGuard {
        self.armed = false;
        QueueGuard {
            inner: self.inner.clone(),
            name: std::mem::take(&mut self.name),
            sk: std::mem::take(&mut self.sk),
            ticket: self.ticket,
            owner: std::mem::take(&mut self.owner),
            heartbeat: self.heartbeat.take().expect("heartbeat present"),
            released: false,
        }
    }

    pub(super) async fn remove(&mut self) {
        self.armed = false;
        if let Some(mut hb) = self.heartbeat.take() {
            hb.stop().await;
            hb.finish();
        }
        if let Err(e) = delete_own(&self.inner, &self.name, &self.sk, &self.owner).await {
            tracing::warn!(lock = %self.name, error = %e, "could not remove queue entry; it will expire");
        }
    }
}

impl Drop for Enqueued {
    fn drop(&mut self) {
        if self.armed {
            self.heartbeat.take();
            spawn_delete(
                self.inner.clone(),
                self.name.clone(),
                self.sk.clone(),
                self.owner.clone(),
            );
        }
    }
}

/// A held [`QueueLock`](super::QueueLock). Release it with [`release`](Self::release); dropping it releases in the
/// background.
///
/// While held, a background task renews the entry. If the lease runs out before a renewal succeeds
/// (e.g. DynamoDB unreachable) or the entry was removed by a waiter that judged it dead, the lock is
/// lost: see [`is_lost`](Self::is_lost) and [`lost`](Self::lost).
#[derive(Debug)]
pub struct QueueGuard {
    inner: Arc<Inner>,
    name: String,
    sk: String,
    ticket: u64,
    owner: String,
    heartbeat: Heartbeat,
    released: bool,
}

impl QueueGuard {
    /// The lock name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The ticket this acquisition drew.
    pub fn ticket(&self) -> u64 {
        self.ticket
    }

    /// The fencing token: the ticket. Grants of one lock (and namespace) have strictly increasing
    /// tokens; a resource that remembers the highest token it has seen can reject a stale holder.
    pub fn fencing_token(&self) -> u64 {
        self.ticket
    }

    /// The owner id written into the entry (unique per acquisition).
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// True once the lock is lost (or its local lease ran out without a successful renewal).
    pub fn is_lost(&self) -> bool {
        self.heartbeat.is_lost()
    }

    /// Time left on the local lease before the lock counts as lost unless renewed. The lease counts
    /// from the first send of a ticket request that may have written this guard's entry (or of its
    /// last confirmed renewal): after lost responses it can be short of the full lease.
    pub fn lease_remaining(&self) -> Duration {
        self.heartbeat.remaining().unwrap_or(Duration::MAX)
    }

    /// A handle that tells when the lock is lost; it can be moved into the worker.
    pub fn lost_signal(&self) -> LostSignal {
        self.heartbeat.signal()
    }

    /// Resolves when the lock is lost; never if it stays held.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn lost(&self) {
        self.heartbeat.signal().lost().await
    }

    /// Renews the entry now (the background task also does, every heartbeat interval).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave a renewal applied; that is harmless.
    pub async fn heartbeat(&self) -> Result<(), LockError> {
        self.heartbeat.beat_now().await
    }

    /// Releases the lock: stops the heartbeat and removes the entry (one `UpdateItem`); the next waiter then holds the lock.
    ///
    /// Returns [`LockError::Lost`] if the entry had already been removed as dead: the critical section may
    /// have overlapped with the next holder's.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped midway, the guard's `Drop` removes the entry in the background.
    pub async fn release(mut self) -> Result<(), LockError> {
        self.heartbeat.stop().await;
        let deleted = delete_own(&self.inner, &self.name, &self.sk, &self.owner).await;
        self.released = true;
        self.heartbeat.finish();
        match deleted {
            Ok(true) => {
                tracing::debug!(lock = %self.name, ticket = self.ticket, "queue lock released");
                crate::metrics::lock_released(crate::metrics::QUEUE_LOCK);
                Ok(())
            }
            Ok(false) => Err(LockError::Lost {
                name: self.name.clone(),
            }),
            Err(e) => Err(e.into()),
        }
    }
}

impl Drop for QueueGuard {
    fn drop(&mut self) {
        if !self.released {
            self.heartbeat.finish();
            spawn_delete(
                self.inner.clone(),
                self.name.clone(),
                self.sk.clone(),
                self.owner.clone(),
            );
        }
    }
}
