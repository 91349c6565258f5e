//! A fair (FIFO) ticket queue lock.
//!
//! # How it works
//!
//! Each acquire takes the next ticket `t` of the lock's counter and writes its queue row
//! `{pk: name, sk: "<namespace>#q#<t, zero-padded to 38 digits>"}` **in one `TransactWriteItems`**:
//! the counter update is conditional on the counter still being `t - 1`, the row put on the row not
//! existing. So a ticket exists exactly when its row was committed before any higher ticket was
//! issued, and a waiter's strongly consistent Query can never be overtaken by a lower ticket whose
//! row is not written yet (the race of the naive "increment, then insert" design).
//!
//! The acquirer then polls (strongly consistent, paginated Query of the rows up to its own) until
//! no live row is ahead of its own. Holders and waiters heartbeat their rows; a row whose heartbeat
//! stopped is judged dead (see [`Expiry`]) and deleted with a condition on the heartbeat value that
//! was judged, so a row that renewed in the meantime is never deleted. Release deletes the row.
//!
//! The ticket is the fencing token: tickets are granted in increasing order, and a ticket whose row
//! was deleted can never be granted later.
//!
//! ```no_run
//! # async fn demo(client: aws_sdk_dynamodb::Client) -> Result<(), dynamodb_transactions::lock::LockError> {
//! use std::time::Duration;
//! use dynamodb_transactions::lock::Wait;
//! use dynamodb_transactions::lock::queue::QueueLock;
//!
//! let locks = QueueLock::builder(client).table("locks").lease_duration(Duration::from_secs(10)).build()?;
//! locks.create_table().await?;
//! let guard = locks.acquire("invoice-42", Wait::For(Duration::from_secs(30))).await?;
//! println!("holding ticket {}", guard.fencing_token());
//! // ... work, passing the fencing token to the resource ...
//! guard.release().await?;
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure;
use tokio::time::Instant;

use super::util::*;
use super::{Expiry, LockError, SharedClock, SystemClock, Wait};
use crate::Item;

const ALL_OLD: ReturnValuesOnConditionCheckFailure = ReturnValuesOnConditionCheckFailure::AllOld;

mod builder;
mod enqueue;
mod guard;
mod row;
mod wait;

pub use builder::QueueLockBuilder;
pub use guard::QueueGuard;
use row::ttl_secs;

/// A fair (FIFO) distributed mutual-exclusion lock; see the [module docs](self).
///
/// Cheap to clone; clones share configuration and observations. One handle serves any number of
/// lock names.
#[derive(Debug, Clone)]
pub struct QueueLock {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    table: String,
    namespace: String,
    lease: Duration,
    heartbeat: Duration,
    expiry: Expiry,
    skew_margin: Duration,
    poll_head: Duration,
    poll_max: Duration,
    page_size: i32,
    ttl_grace: Duration,
    clock: SharedClock,
    /// What this handle saw of other rows: (name, sk) -> observation.
    observations: Mutex<HashMap<(String, String), Observation>>,
    /// Last known counter value per lock name.
    counters: Mutex<HashMap<String, u64>>,
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueLock")
            .field("table", &self.table)
            .field("namespace", &self.namespace)
            .field("lease", &self.lease)
            .field("heartbeat", &self.heartbeat)
            .field("expiry", &self.expiry)
            .field("skew_margin", &self.skew_margin)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone)]
struct Observation {
    owner: String,
    hb: u64,
    since: Instant,
}

impl QueueLock {
    /// A builder over `client`.
    pub fn builder(client: Client) -> QueueLockBuilder {
        QueueLockBuilder {
            client,
            table: None,
            namespace: String::new(),
            lease: Duration::from_secs(20),
            heartbeat: None,
            expiry: Expiry::Observed,
            skew_margin: Duration::from_secs(2),
            poll_head: Duration::from_millis(50),
            poll_max: Duration::from_secs(2),
            page_size: 25,
            ttl_grace: Duration::from_secs(3600),
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

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.inner.namespace
    }

    /// A ticket counter over the same table. `counter.next(name)` shares the counter of the
    /// default namespace of lock `name`.
    pub fn ticket_counter(&self) -> super::TicketCounter {
        super::TicketCounter::new(self.inner.client.clone(), self.inner.table.clone())
    }

    /// Acquires lock `name`, waiting as `wait` says.
    ///
    /// Costs, when nobody else is around: one `TransactWriteItems` (two writes) to take a ticket
    /// and enter the queue (plus one `GetItem` the first time this handle sees the lock), and one
    /// Query. Each poll while waiting is one Query; the waiter's row is renewed every heartbeat
    /// interval. A waiter that gives up removes its row.
    ///
    /// Errors: [`LockError::WouldBlock`] ([`Wait::NoWait`] and someone is ahead),
    /// [`LockError::Timeout`], [`LockError::Lost`] (our own row was judged dead and deleted while
    /// we waited, e.g. after a long pause), [`LockError::DynamoDb`].
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped after the row was written, the row's heartbeat stops at once and
    /// a background task (spawned on the current Tokio runtime) deletes the row, so the queue
    /// does not wait for it. If it is dropped while the ticket request is in flight and that
    /// request lands afterwards, the row is never renewed: waiters behind it skip it once it has
    /// been silent for a lease (plus margin). Nothing is ever granted to a dropped future.
    pub async fn acquire(&self, name: &str, wait: Wait) -> Result<QueueGuard, LockError> {
        let start = Instant::now();
        let deadline = wait.deadline(start);
        let enqueue_deadline = match wait {
            Wait::NoWait => Some(start + self.inner.lease),
            _ => deadline,
        };
        let owner = uuid::Uuid::new_v4().to_string();
        let mut entry = self.enqueue(name, &owner, enqueue_deadline, start).await?;
        match self.wait_turn(&entry, wait, deadline, start).await {
            Ok(()) => {
                tracing::debug!(lock = name, ticket = entry.ticket, waited = ?start.elapsed(), "queue lock acquired");
                Ok(entry.into_guard())
            }
            Err(e) => {
                tracing::debug!(lock = name, ticket = entry.ticket, error = %e, "giving up; leaving the queue");
                crate::metrics::lock_failed(crate::metrics::QUEUE_LOCK, &e);
                entry.remove().await;
                Err(e)
            }
        }
    }

    /// Acquires lock `name` if nobody holds it or waits ahead: `Ok(None)` otherwise.
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire`](Self::acquire).
    pub async fn try_acquire(&self, name: &str) -> Result<Option<QueueGuard>, LockError> {
        match self.acquire(name, Wait::NoWait).await {
            Ok(g) => Ok(Some(g)),
            Err(LockError::WouldBlock { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub(super) fn counter_sk(&self) -> String {
        format!("{}{COUNTER_SK}", self.inner.namespace)
    }

    pub(super) fn queue_prefix(&self) -> String {
        format!("{}#q#", self.inner.namespace)
    }

    pub(super) fn row_sk(&self, ticket: u64) -> String {
        format!("{}{ticket:038}", self.queue_prefix())
    }

    pub(super) fn row_item(&self, name: &str, sk: &str, owner: &str) -> Item {
        let inner = &self.inner;
        let now = inner.clock.now_millis();
        let exp = now + millis(inner.lease);
        let mut item = key(name, sk);
        item.insert(OWNER.into(), s(owner));
        item.insert(HB.into(), n(0));
        item.insert(LEASE_MS.into(), n(millis(inner.lease)));
        item.insert(EXP_MS.into(), n(exp));
        item.insert(TTL.into(), n(ttl_secs(exp, inner.ttl_grace)));
        item.insert(CREATED_MS.into(), n(now));
        item
    }
}
