//! Distributed locks on DynamoDB: a FIFO ticket queue lock and lease locks with fencing tokens.
//!
//! * [`queue::QueueLock`]: a fair (first in, first out) mutual-exclusion lock. Each acquirer takes a
//!   ticket from an atomic counter and enters the queue in the same write; it proceeds when its
//!   entry is first among the live entries. The ticket is the fencing token.
//! * [`lease::LeaseLock`]: a lease lock with exclusive and shared (read) modes, a fencing token that
//!   grows with every acquisition, an optional data payload, and a choice between *fail-open*
//!   (leases expire when their holder stops heartbeating) and *fail-closed* (only release frees the
//!   lock).
//! * [`TicketCounter`]: the atomic counter behind the queue, usable on its own.
//!
//! Both locks live in one kind of table (see [`create_lock_table`] and `docs/LOCKS.md`): hash key
//! `pk` (S), range key `sk` (S), with DynamoDB TTL on the attribute `ttl` for garbage collection.
//!
//! # Time
//!
//! A dead holder is detected by default without trusting other machines' clocks: a waiter watches
//! the holder's heartbeat counter and declares it dead only when the counter has not changed for a
//! whole lease (plus [a margin](queue::QueueLockBuilder::clock_skew_margin)) measured on the waiter's
//! own monotonic clock ([`Expiry::Observed`]). Opting into [`Expiry::WallClock`] compares the stored
//! expiry with the local wall clock instead, tolerating clock offsets up to the margin; this hands
//! over faster after a crash. The wall clock is read through a [`Clock`], which tests replace to
//! inject skew.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod counter;
mod error;
mod heartbeat;
pub mod lease;
pub mod queue;
mod table;
mod util;

pub use counter::TicketCounter;
pub use error::LockError;
pub use heartbeat::LostSignal;
pub use table::create_lock_table;

/// How long an acquire waits for the lock ("record wait").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Fail at once with [`LockError::WouldBlock`] if anyone holds the lock or is ahead in the queue.
    NoWait,
    /// Wait at most this long, then fail with [`LockError::Timeout`].
    For(Duration),
    /// Wait until the lock is granted.
    Forever,
}

impl Wait {
    pub(crate) fn deadline(&self, start: tokio::time::Instant) -> Option<tokio::time::Instant> {
        match self {
            Wait::NoWait => Some(start),
            Wait::For(d) => Some(start + *d),
            Wait::Forever => None,
        }
    }
}

/// How waiters decide that a holder (or a waiter ahead in a queue) is dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Expiry {
    /// The holder is dead when its heartbeat counter has not changed for its lease duration plus
    /// the clock-skew margin, measured on the observer's monotonic clock from the moment the
    /// observer first saw that counter value. Immune to wall-clock offsets between machines; a
    /// freshly started observer must watch for a whole lease before taking over.
    #[default]
    Observed,
    /// The holder is dead when the observer's wall clock ([`Clock`]) is past the stored expiry plus
    /// the clock-skew margin. Hands over sooner after a crash, but is only safe when the machines'
    /// clocks differ by less than the margin.
    WallClock,
}

/// A wall-clock time source, in milliseconds since the Unix epoch.
///
/// The locks read the wall clock only to write expiry times (for [`Expiry::WallClock`] and for
/// DynamoDB TTL) and, in [`Expiry::WallClock`] mode, to judge other holders' expiry. Monotonic
/// time always comes from `tokio::time::Instant`. Replace the clock to simulate skew:
///
/// ```
/// use dynamodb_transactions::lock::{Clock, OffsetClock};
/// let ahead = OffsetClock::new(3_600_000); // this machine's clock runs one hour ahead
/// assert!(ahead.now_millis() > dynamodb_transactions::lock::SystemClock.now_millis());
/// ```
pub trait Clock: fmt::Debug + Send + Sync + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_millis(&self) -> i64;
}

/// The system wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_millis(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }
}

/// The system clock shifted by a fixed offset, to simulate a machine whose clock is wrong.
#[derive(Debug, Clone, Copy, Default)]
pub struct OffsetClock {
    offset_ms: i64,
}

impl OffsetClock {
    /// A clock `offset_ms` milliseconds ahead of the system clock (negative: behind).
    pub fn new(offset_ms: i64) -> Self {
        OffsetClock { offset_ms }
    }
}

impl Clock for OffsetClock {
    fn now_millis(&self) -> i64 {
        SystemClock.now_millis() + self.offset_ms
    }
}

/// A shared clock handle.
pub(crate) type SharedClock = Arc<dyn Clock>;
