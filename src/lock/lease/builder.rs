//! The builder of a lease lock handle.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::Client;

use super::{Inner, LeaseLock};
use crate::lock::{Clock, Expiry, LockError, SharedClock};

/// Builds a [`LeaseLock`]. Get one from [`LeaseLock::builder`].
#[derive(Debug, Clone)]
pub struct LeaseLockBuilder {
    pub(super) client: Client,
    pub(super) table: Option<String>,
    pub(super) lease: Duration,
    pub(super) heartbeat: Option<Duration>,
    pub(super) manual: bool,
    pub(super) fail_closed: bool,
    pub(super) expiry: Expiry,
    pub(super) skew_margin: Duration,
    pub(super) poll: Duration,
    pub(super) clock: SharedClock,
}

impl LeaseLockBuilder {
    /// The lock table (required). Create it with [`LeaseLock::create_table`].
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = Some(table.into());
        self
    }

    /// How long a lease lasts without renewal. Default 20 s.
    pub fn lease_duration(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How often the background task renews held leases. Default: a quarter of the lease; at most
    /// half of it.
    pub fn heartbeat_interval(mut self, every: Duration) -> Self {
        self.heartbeat = Some(every);
        self
    }

    /// No background renewal: the holder calls [`LeaseGuard::heartbeat`](super::LeaseGuard::heartbeat) itself, at least once
    /// per lease.
    pub fn manual_heartbeat(mut self) -> Self {
        self.manual = true;
        self
    }

    /// Fail-closed locks: they never expire and are never taken over; only release frees them.
    /// If a holder dies, an operator must clear the lock.
    pub fn fail_closed(mut self) -> Self {
        self.fail_closed = true;
        self
    }

    /// How dead holders are recognised. Default [`Expiry::Observed`].
    pub fn expiry(mut self, expiry: Expiry) -> Self {
        self.expiry = expiry;
        self
    }

    /// Extra time before a silent holder counts as dead (clock offsets in [`Expiry::WallClock`]
    /// mode, clock-rate drift in [`Expiry::Observed`] mode). Default 2 s.
    pub fn clock_skew_margin(mut self, margin: Duration) -> Self {
        self.skew_margin = margin;
        self
    }

    /// How often a waiter retries. Default 200 ms (sooner when a holder is about to expire).
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll = every;
        self
    }

    /// The wall clock (default [`SystemClock`](crate::lock::SystemClock)). Replace it to simulate clock skew.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Builds the lock handle.
    pub fn build(self) -> Result<LeaseLock, LockError> {
        let table = self
            .table
            .ok_or_else(|| LockError::InvalidConfig("a table is required".into()))?;
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
        if self.poll.is_zero() {
            return Err(LockError::InvalidConfig(
                "the poll interval must be positive".into(),
            ));
        }
        Ok(LeaseLock {
            inner: Arc::new(Inner {
                client: self.client,
                table,
                lease: self.lease,
                heartbeat: if self.manual { None } else { Some(heartbeat) },
                fail_closed: self.fail_closed,
                expiry: self.expiry,
                skew_margin: self.skew_margin,
                poll: self.poll,
                clock: self.clock,
                observations: Mutex::new(HashMap::new()),
                records: Mutex::new(HashSet::new()),
            }),
        })
    }
}
