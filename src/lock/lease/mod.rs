//! Lease locks: exclusive or shared, fail-open or fail-closed, with fencing tokens and a payload.
//!
//! # How it works
//!
//! Each lock is one record `{pk: name, sk: "#lease"}` that is never deleted (release only clears
//! the holder), so its `fence` counter grows with every acquisition, exclusive or shared, and never
//! goes back. An exclusive holder is recorded as `owner` (an id unique to the acquisition) with a
//! heartbeat counter `hb`; shared holders are entries of the map `readers`. Acquiring is one
//! conditional `UpdateItem` (`ReturnValuesOnConditionCheckFailure::AllOld` shows the current holder
//! when it fails).
//!
//! * **Fail-open** (default): holders renew their lease in the background. A waiter takes over from
//!   a holder whose heartbeat counter has not changed for its lease (plus a margin) on the
//!   waiter's own monotonic clock ([`Expiry::Observed`]), or, if opted in, whose stored expiry is
//!   past on the waiter's wall clock ([`Expiry::WallClock`]). The takeover is conditional on the
//!   counter value that was judged.
//! * **Fail-closed** ([`LeaseLockBuilder::fail_closed`]): the lock never expires; only release
//!   frees it. No heartbeats.
//!
//! A renewal whose response is lost is retried with the same target value; since the condition is
//! "the holder is still this acquisition and the counter is not past the target", an applied
//! earlier attempt makes the retry succeed too, and a request of an old renewal that arrives late
//! cannot set the counter back. Renewal never stops silently: it retries until the local lease runs
//! out and then reports the lock lost through the guard.
//!
//! The local lease always counts from the earliest send that may have written what waiters judge
//! (a waiter may see a write from the moment it lands): after a lost acquire response, from the
//! send of the attempt whose write is found on the record, not from the retry that found it; for a
//! renewal, from its first attempt. See "When a lease starts" in `docs/LOCKS.md`.
//!
//! # The simple mutex (try-lock, extend, unlock)
//!
//! ```no_run
//! # async fn demo(client: aws_sdk_dynamodb::Client) -> Result<(), dynamodb_transactions::lock::LockError> {
//! use std::time::Duration;
//! use dynamodb_transactions::lock::lease::LeaseLock;
//!
//! let locks = LeaseLock::builder(client)
//!     .table("locks")
//!     .lease_duration(Duration::from_secs(10))
//!     .manual_heartbeat() // renew by hand with `heartbeat()`
//!     .build()?;
//! if let Some(guard) = locks.try_acquire("nightly-report").await? {
//!     guard.heartbeat().await?; // extend
//!     guard.release().await?; // unlock
//! }
//! # Ok(()) }
//! ```
//!
//! Shared locks admit many readers or one writer; a steady stream of readers can starve a writer
//! (use a [`QueueLock`](super::queue::QueueLock) for fairness).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure;
use tokio::time::Instant;

use super::util::*;
use super::{Expiry, LockError, SharedClock, SystemClock, Wait};
use crate::Error;

mod acquire;
mod builder;
mod guard;
mod judge;

pub use builder::LeaseLockBuilder;
pub use guard::LeaseGuard;

const ALL_OLD: ReturnValuesOnConditionCheckFailure = ReturnValuesOnConditionCheckFailure::AllOld;

/// Sort key of a lease record.
pub(crate) const LEASE_SK: &str = "#lease";

const FREE_OF_READERS: &str = "(attribute_not_exists(#readers) OR size(#readers) = :zero)";

/// A lease lock handle; see the [module docs](self).
///
/// Cheap to clone; clones share configuration and observations. One handle serves any number of
/// lock names.
#[derive(Debug, Clone)]
pub struct LeaseLock {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    table: String,
    lease: Duration,
    heartbeat: Option<Duration>,
    fail_closed: bool,
    expiry: Expiry,
    skew_margin: Duration,
    poll: Duration,
    clock: SharedClock,
    /// (name, holder id) -> (heartbeat value, first seen).
    observations: Mutex<HashMap<(String, String), (u64, Instant)>>,
    /// Lock records known to exist.
    records: Mutex<HashSet<String>>,
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseLock")
            .field("table", &self.table)
            .field("lease", &self.lease)
            .field("heartbeat", &self.heartbeat)
            .field("fail_closed", &self.fail_closed)
            .field("expiry", &self.expiry)
            .field("skew_margin", &self.skew_margin)
            .finish_non_exhaustive()
    }
}

impl LeaseLock {
    /// A builder over `client`.
    pub fn builder(client: Client) -> LeaseLockBuilder {
        LeaseLockBuilder {
            client,
            table: None,
            lease: Duration::from_secs(20),
            heartbeat: None,
            manual: false,
            fail_closed: false,
            expiry: Expiry::Observed,
            skew_margin: Duration::from_secs(2),
            poll: Duration::from_millis(200),
            clock: Arc::new(SystemClock),
        }
    }

    /// Creates this handle's table unless it exists (idempotent; see
    /// [`create_lock_table`](super::create_lock_table)).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the table without TTL enabled; call again.
    pub async fn create_table(&self) -> Result<(), LockError> {
        Ok(super::create_lock_table(&self.inner.client, &self.inner.table).await?)
    }

    /// The table.
    pub fn table(&self) -> &str {
        &self.inner.table
    }

    /// Acquires lock `name` exclusively, waiting as `wait` says.
    ///
    /// Costs one `UpdateItem` when the lock is free; each retry while waiting is one more.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped while an acquiring write is in flight, that write may land: the
    /// lock is then held by nobody alive. In fail-open mode it is never renewed and waiters take
    /// it over after a lease (plus margin); in fail-closed mode it stays locked until cleared.
    pub async fn acquire(&self, name: &str, wait: Wait) -> Result<LeaseGuard, LockError> {
        self.acquire_inner(name, wait, false).await
    }

    /// Acquires lock `name` shared (as one of many readers; no writer at the same time).
    ///
    /// Costs one `UpdateItem` (plus one `PutItem` the first time this handle meets the lock).
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire`](Self::acquire): a shared entry written by a dropped future is never
    /// renewed and is removed by the next writer once it has been silent for a lease.
    pub async fn acquire_shared(&self, name: &str, wait: Wait) -> Result<LeaseGuard, LockError> {
        self.acquire_inner(name, wait, true).await
    }

    /// Acquires lock `name` exclusively if it is free (or its holder is known dead): `Ok(None)`
    /// otherwise. Repeated calls on the same handle keep observing the holder, so they take over a
    /// dead holder's lock once it has been silent for a lease.
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire`](Self::acquire).
    pub async fn try_acquire(&self, name: &str) -> Result<Option<LeaseGuard>, LockError> {
        match self.acquire(name, Wait::NoWait).await {
            Ok(g) => Ok(Some(g)),
            Err(LockError::WouldBlock { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The lock's fencing counter: the token of its latest acquisition (0 if never acquired).
    ///
    /// # Cancel safety
    ///
    /// A read: dropping the future has no effect.
    pub async fn current_fencing_token(&self, name: &str) -> Result<u64, LockError> {
        let out = self
            .inner
            .client
            .get_item()
            .table_name(&self.inner.table)
            .set_key(Some(key(name, LEASE_SK)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| Error::sdk("GetItem", e))?;
        Ok(out.item().and_then(|i| get_u64(i, FENCE)).unwrap_or(0))
    }
}
