//! A fair (FIFO) ticket queue lock.
//!
//! # How it works
//!
//! The whole queue of a lock is one item, the lock's ticket counter `{pk: name, sk: "<ns>#ctr"}`.
//! Acquiring is **one `UpdateItem`** on it that issues the next ticket *and* writes the
//! acquirer's entry (owner id, heartbeat counter, lease) with that ticket, returning the whole
//! queue (`ReturnValues::AllNew`). An entry therefore exists from the instant its ticket does:
//! the race of the naive "increment, then insert" design (a lower ticket whose row is not yet
//! written, overtaken by a higher one) cannot happen. The entry with the lowest ticket holds the
//! lock; when that is the acquirer's, the acquire is done with that one request.
//!
//! Otherwise the acquirer waits: it reads the item (strongly consistent `GetItem`) when its turn
//! is likely: the head of the queue often (every `poll_interval.head`), the others at a pace
//! derived from how fast the queue has been moving, so that they are awake before their turn.
//! Holders and waiters heartbeat their entries; an entry whose heartbeat stopped is judged dead
//! (see [`Expiry`]) and removed with a condition on the heartbeat value that was judged, so an
//! entry that renewed in the meantime is never removed. Release removes the holder's entry (one
//! `UpdateItem`), which hands the lock to the next entry: no separate grant write.
//!
//! The ticket is the fencing token: tickets are granted in increasing order, and a ticket whose
//! entry was removed can never be granted later.
//!
//! One item holds the queue, so it is bounded by DynamoDB's 400 KB item size (some 3,000
//! waiters), each write costs one write unit per KB of the item, and all writes of one lock
//! serialise on it (about 1,000 write units a second on DynamoDB).
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

const ALL_OLD: ReturnValuesOnConditionCheckFailure = ReturnValuesOnConditionCheckFailure::AllOld;

mod builder;
mod enqueue;
mod entry;
mod guard;
mod pace;
mod state;
mod wait;

pub use builder::QueueLockBuilder;
pub use guard::QueueGuard;
use pace::Pace;

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
    clock: SharedClock,
    /// What this handle saw of other entries: (name, owner) -> observation.
    observations: Mutex<HashMap<(String, String), Observation>>,
    /// How fast each lock's queue has been moving, as this handle saw it.
    pace: Mutex<HashMap<String, Pace>>,
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
            poll_head: Duration::from_millis(4),
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
    /// Costs, when nobody else is around: one `UpdateItem` (it issues the ticket, writes the entry
    /// and shows that nobody is ahead). While waiting, each look at the queue is one strongly
    /// consistent `GetItem`: often at the head of the queue, rarely further back. The entry is
    /// renewed every heartbeat interval. A waiter that gives up removes its entry.
    ///
    /// Errors: [`LockError::WouldBlock`] ([`Wait::NoWait`] and someone is ahead),
    /// [`LockError::Timeout`], [`LockError::Lost`] (our own entry was judged dead and removed
    /// while we waited, e.g. after a long pause), [`LockError::DynamoDb`].
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped after the entry was written, its heartbeat stops at once and a
    /// background task (spawned on the current Tokio runtime) removes the entry, so the queue
    /// does not wait for it. The same task runs if it is dropped while the acquiring request is
    /// in flight (it may have landed, its answer still on its way). Only if that request lands
    /// after the removal is the entry left: never renewed, it is removed by the waiters behind it
    /// once it has been silent for a lease (plus margin). Nothing is ever granted to a dropped
    /// future.
    pub async fn acquire(&self, name: &str, wait: Wait) -> Result<QueueGuard, LockError> {
        let start = Instant::now();
        let deadline = wait.deadline(start);
        let enqueue_deadline = match wait {
            Wait::NoWait => Some(start + self.inner.lease),
            _ => deadline,
        };
        let owner = uuid::Uuid::new_v4().to_string();
        let (mut entry, state) = self
            .enqueue(name, &owner, wait, enqueue_deadline, start)
            .await?;
        match self.wait_turn(&entry, state, wait, deadline, start).await {
            Ok(()) => {
                tracing::debug!(lock = name, ticket = entry.ticket, waited = ?start.elapsed(), "queue lock acquired");
                Ok(entry.into_guard())
            }
            Err(e) => {
                tracing::debug!(lock = name, ticket = entry.ticket, error = %e, "giving up; leaving the queue");
                crate::metrics::lock_failed(crate::metrics::QUEUE_LOCK, e.is_timeout());
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
}
