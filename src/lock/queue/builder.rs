//! The builder of a queue lock handle.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::Client;

use super::{Inner, QueueLock};
use crate::lock::{Clock, Expiry, LockError, SharedClock};

/// Builds a [`QueueLock`]. Get one from [`QueueLock::builder`].
#[derive(Debug, Clone)]
pub struct QueueLockBuilder {
    pub(super) client: Client,
    pub(super) table: Option<String>,
    pub(super) namespace: String,
    pub(super) lease: Duration,
    pub(super) heartbeat: Option<Duration>,
    pub(super) expiry: Expiry,
    pub(super) skew_margin: Duration,
    pub(super) poll_head: Duration,
    pub(super) poll_max: Duration,
    pub(super) page_size: i32,
    pub(super) ttl_grace: Duration,
    pub(super) clock: SharedClock,
}

impl QueueLockBuilder {
    /// The lock table (required). Create it with [`QueueLock::create_table`].
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = Some(table.into());
        self
    }

    /// A namespace, so one entity (lock name) can carry several independent queues. The queue of
    /// namespace `ns` is the item with sort key `"<ns>#ctr"` (its own counter).
    /// Default: empty. Must not contain `#`.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// How long a row stays alive without a heartbeat. Default 20 s.
    pub fn lease_duration(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How often holders and waiters renew their entries. Default: a quarter of the lease. Must be at
    /// most half the lease.
    pub fn heartbeat_interval(mut self, every: Duration) -> Self {
        self.heartbeat = Some(every);
        self
    }

    /// How dead entries are recognised. Default [`Expiry::Observed`].
    pub fn expiry(mut self, expiry: Expiry) -> Self {
        self.expiry = expiry;
        self
    }

    /// Extra time before a silent row counts as dead: covers clock offsets between machines in
    /// [`Expiry::WallClock`] mode and clock-rate drift in [`Expiry::Observed`] mode. Default 2 s.
    pub fn clock_skew_margin(mut self, margin: Duration) -> Self {
        self.skew_margin = margin;
        self
    }

    /// Polling: the waiter at the head of the queue polls every `head` (once most of a departure's
    /// time has passed since the last departure); a waiter further back looks
    /// again when, at the pace the queue has been moving, its turn nears (at first, `k` places
    /// back, after `k × head`), and never more than `max` apart. Defaults 4 ms and 2 s: a faster
    /// head poll hands the lock over sooner for more reads (each a read unit).
    pub fn poll_interval(mut self, head: Duration, max: Duration) -> Self {
        self.poll_head = head;
        self.poll_max = max;
        self
    }

    /// Rows read per Query page (1..=1000). Default 25.
    ///
    /// No effect since the queue became one item (read with one `GetItem`); kept so existing
    /// callers build. Values outside 1..=1000 are still rejected.
    pub fn page_size(mut self, rows: i32) -> Self {
        self.page_size = rows;
        self
    }

    /// How long after its expiry DynamoDB TTL may delete a row. Default one hour.
    ///
    /// No effect since the queue became one item: the lock's counter item, which is never deleted
    /// (dead entries are removed by the waiters that judge them dead). Kept so existing callers
    /// build.
    pub fn ttl_grace(mut self, grace: Duration) -> Self {
        self.ttl_grace = grace;
        self
    }

    /// The wall clock (default [`SystemClock`](crate::lock::SystemClock)). Replace it to simulate clock skew.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Builds the lock handle.
    pub fn build(self) -> Result<QueueLock, LockError> {
        let table = self
            .table
            .ok_or_else(|| LockError::InvalidConfig("a table is required".into()))?;
        if self.namespace.contains('#') {
            return Err(LockError::InvalidConfig(format!(
                "namespace {:?} contains '#'",
                self.namespace
            )));
        }
        if self.lease < Duration::from_millis(100) {
            return Err(LockError::InvalidConfig(
                "the lease must be at least 100 ms".into(),
            ));
        }
        let heartbeat = self.heartbeat.unwrap_or(self.lease / 4);
        if heartbeat.is_zero() || heartbeat * 2 > self.lease {
            return Err(LockError::InvalidConfig(format!(
                "the heartbeat interval ({heartbeat:?}) must be positive and at most half the lease ({:?})",
                self.lease
            )));
        }
        if !(1..=1000).contains(&self.page_size)
            || self.poll_head.is_zero()
            || self.poll_max < self.poll_head
        {
            return Err(LockError::InvalidConfig(
                "invalid page size or poll intervals".into(),
            ));
        }
        Ok(QueueLock {
            inner: Arc::new(Inner {
                client: self.client,
                table,
                namespace: self.namespace,
                lease: self.lease,
                heartbeat,
                expiry: self.expiry,
                skew_margin: self.skew_margin,
                poll_head: self.poll_head,
                poll_max: self.poll_max,
                clock: self.clock,
                observations: Mutex::new(HashMap::new()),
                pace: Mutex::new(HashMap::new()),
            }),
        })
    }
}
